// kernels/cuda/attention/indexer_score_shared_keys_bf16.cuh — IndexerScore's
// form IndexerScoreForm::kSharedKeysMmaBf16: the shared-keys mma form with
// its operands staged once as bf16. No host dependencies.
//
// What a warp computes, and in which order, is kSharedKeysMmaSum's
// (indexer_score_shared_keys.cuh): 4 queries a block, a warp a query, tiles
// of 64 keys staged once for the four, each pass of 32 heads as mma.sync
// m16n8k16 accumulators over the bf16 values of q's MXFP4 form and of the
// MXFP4 keys, the terms round(relu(round(d)) * w), and the head sum in head
// order through the warp's shared scratch, 16 keys a round. Three things
// differ, none of them in the bits:
//  * q and the key tile are staged as bf16 (IndexerSharedKeysBf16Layout): the
//    values PackBf16x2 made of the staged floats at every use in the other
//    form (the same rounding, once), and the warps load the mma fragments
//    with ldmatrix (6 loads a 16-channel step instead of 24 float-pair loads
//    and 24 conversions);
//  * a term's two bf16 roundings (kRoundBf16) take one cvt.rn.bf16x2 for two
//    values (rounding.cuh's RoundPairToBf16) instead of RoundToBf16's integer
//    sequence a value. The two agree on every value that is not NaN and on the NaN the
//    tensor cores and multiplies make (0x7fffffff); they differ only for a NaN
//    of another payload, which neither the mma nor __fmul_rn returns;
//  * 61 KB a block at V4.1's 32 x 128 (three blocks an SM, not two).
#ifndef WEIR_KERNELS_CUDA_ATTENTION_INDEXER_SCORE_SHARED_KEYS_BF16_CUH_
#define WEIR_KERNELS_CUDA_ATTENTION_INDEXER_SCORE_SHARED_KEYS_BF16_CUH_

#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/cuda/attention/indexer_score.cuh"
#include "kernels/cuda/attention/indexer_score_shared_keys.cuh"
#include "kernels/cuda/attention/indexer_score_shared_keys_layout.h"
#include "kernels/cuda/dense/fake_quant.cuh"
#include "kernels/cuda/grid_dependency.cuh"
#include "kernels/cuda/mma_bf16.cuh"
#include "kernels/cuda/rounding.cuh"

namespace weir::kernels::cuda {

// The bf16 bits cvt.rn gives `x` (the half PackBf16x2 gives it).
__device__ __forceinline__ uint16_t Bf16RnBits(float x) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(x));
}

// ldmatrix .x4: four 8 x 8 bf16 matrices, lane l giving the shared address of
// row l & 7 of matrix l >> 3; register j of lane (g, t) holds matrix j's row
// g, values 2 t and 2 t + 1.
__device__ __forceinline__ void LdMatrixX4(uint32_t (&r)[4], const uint16_t* at) {
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(at));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// Stages `count` MXFP4 keys of the tile as bf16: key i is pool row row_of(i)
// (a negative row stages NaN's bf16 form), each thread a word of 8 codes and
// its scale at a time, written as one 16-byte store of 8 bf16 values
// (PackBf16x2 of the exact Mxfp4Value pairs: what the fp32 staging's users
// packed). kBatch words' loads in flight a thread.
template <int kThreads, typename RowOf, int kBatch>
__device__ __forceinline__ void StageIndexerKeysBf16(uint16_t* tile, int stride, RowOf row_of,
                                                     int count, int dim,
                                                     const uint8_t* __restrict__ k_codes,
                                                     const uint8_t* __restrict__ k_scales,
                                                     int tid) {
  const int steps_per_row = dim / 8, steps = count * steps_per_row;
  const uint32_t* code_words = reinterpret_cast<const uint32_t*>(k_codes);
  const float nan = __int_as_float(0x7fffffff);
  for (int base = tid; base < steps; base += kThreads * kBatch) {
    uint32_t loaded[kBatch], scale[kBatch];
    int64_t rows[kBatch];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int e = base + b * kThreads;
      rows[b] = -1;
      loaded[b] = 0;
      scale[b] = 0;
      if (e >= steps) continue;
      const int r = e / steps_per_row, c = (e % steps_per_row) * 8;
      rows[b] = row_of(r);
      if (rows[b] < 0) continue;
      const int64_t at = rows[b] * dim + c;
      loaded[b] = code_words[at / 8];
      scale[b] = k_scales[at / 32];
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int e = base + b * kThreads;
      if (e >= steps) continue;
      const int r = e / steps_per_row, c = (e % steps_per_row) * 8;
      uint32_t w[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        w[j] = rows[b] < 0 ? PackBf16x2(nan, nan)
                           : PackBf16x2(Mxfp4Value((loaded[b] >> (8 * j)) & 0xFu, scale[b]),
                                        Mxfp4Value((loaded[b] >> (8 * j + 4)) & 0xFu, scale[b]));
      }
      *reinterpret_cast<uint4*>(tile + r * stride + c) = make_uint4(w[0], w[1], w[2], w[3]);
    }
  }
}

// The terms of a pass, in place (the bf16-staged mma forms'): d[mt][nt][e]
// (head pass + MmaHead(lane, mt, e), whose weight is ws_pass[MmaHead(lane,
// mt, e)]) becomes round(relu(round(d)) * w), relu as d < 0 ? 0 : d and a
// term's two roundings (kRoundBf16) one cvt.rn.bf16x2 for the two values of
// e = 2 h and 2 h + 1, which share the head.
template <bool kRoundBf16, int kNt>
__device__ __forceinline__ void MmaTermsInPlace(float (&d)[2][kNt][4], const float* ws_pass,
                                                int lane) {
#pragma unroll
  for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float w = ws_pass[IndexerSharedKeysLayout::MmaHead(lane, mt, 2 * h)];
#pragma unroll
      for (int nt = 0; nt < kNt; ++nt) {
        float x0 = d[mt][nt][2 * h], x1 = d[mt][nt][2 * h + 1];
        if constexpr (kRoundBf16) RoundPairToBf16(x0, x1);
        x0 = x0 < 0.0f ? 0.0f : x0;  // std::max(d, 0.0f)
        x1 = x1 < 0.0f ? 0.0f : x1;
        x0 = __fmul_rn(x0, w);
        x1 = __fmul_rn(x1, w);
        if constexpr (kRoundBf16) RoundPairToBf16(x0, x1);
        d[mt][nt][2 * h] = x0;
        d[mt][nt][2 * h + 1] = x1;
      }
    }
  }
}

// Grid, arguments and runs as IndexerScoreSharedKeysKernel; needs q_mxfp4,
// MXFP4 keys (k unused) and dim % 32 == 0. kDim > 0 fixes dim. Dynamic
// shared memory: IndexerSharedKeysBf16Layout(heads, dim).bytes.
template <int kDim, bool kRoundBf16>
__global__ void __launch_bounds__(IndexerSharedKeysLayout::kThreads, 3)
    IndexerScoreSharedKeysBf16Kernel(
        const float* __restrict__ q, const uint8_t* __restrict__ k_codes,
        const uint8_t* __restrict__ k_scales, const float* __restrict__ weights,
        const int64_t* __restrict__ visible_len, const int64_t* __restrict__ key_offset,
        const int32_t* __restrict__ block_table, const int32_t* __restrict__ table_slot,
        int table_width, int entries_per_block, float* __restrict__ out, int64_t queries, int heads,
        int dim_arg, int64_t keys, float weights_factor, IndexerSharedKeysGrid grid) {
  GridDependencyPrologue();
  using L = IndexerSharedKeysLayout;
  constexpr int kQ = L::kQueries, kT = L::kKeys;
  constexpr int kStageBatch = 8, kQBatch = 8;
  extern __shared__ __align__(16) unsigned char shared_keys_bf16_smem[];
  const int dim = kDim > 0 ? kDim : dim_arg;
  const IndexerSharedKeysBf16Layout layout(heads, dim);
  const int stride = layout.stride, head_rows = layout.head_rows;
  uint16_t* qs = reinterpret_cast<uint16_t*>(shared_keys_bf16_smem + layout.q_offset);
  float* ws = reinterpret_cast<float*>(shared_keys_bf16_smem + layout.w_offset);
  uint16_t* ks = reinterpret_cast<uint16_t*>(shared_keys_bf16_smem + layout.k_offset);
  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid % 32, warp = tid / 32;
  float* const sum_scratch = reinterpret_cast<float*>(shared_keys_bf16_smem + layout.sum_offset) +
                             warp * L::kSumWarpFloats;
  __shared__ SharedKeysRuns<kQ> runs;
  __shared__ int64_t s_rows[kT];  // paged keys: the pool row of each key of the tile
  const int64_t s0 = grid.Group(blockIdx.x) * kQ;
  const int nq = static_cast<int>(queries - s0 < kQ ? queries - s0 : kQ);
  const int64_t tile_begin = grid.Range(blockIdx.x) * grid.tiles_per_block;
  const int64_t tile_end = tile_begin + grid.tiles_per_block < grid.tiles
                               ? tile_begin + grid.tiles_per_block
                               : grid.tiles;
  auto round = [](float x) { return kRoundBf16 ? RoundToBf16(x) : x; };

  if (tid == 0) {
    FindSharedKeysRuns<kQ>(runs, s0, nq, visible_len, key_offset, block_table, table_slot,
                           table_width, keys);
  }
  __syncthreads();
  bool work = false;  // block-uniform: some run sees a key of the range
#pragma unroll
  for (int o = 0; o < kQ; ++o) work = work || runs.reach[o] > tile_begin * kT;

  if (work) {
    // The group's heads as the bf16 values of their MXFP4 form at rows h,
    // and the weights. No barrier here: the first run of the first tile
    // begins with one.
    StageSharedKeysHeads<kQ, L::kThreads, kQBatch>(
        q, weights, ws, s0, nq, heads, head_rows, dim, /*q_mxfp4=*/true, weights_factor, round, tid,
        [&](int i, int h, int c, float v) {
          qs[(i * head_rows + h) * stride + c] = Bf16RnBits(v);
        });
  }

  const int64_t my_visible = warp < nq ? runs.visible[warp] : 0;
  const bool my_bad = warp >= nq || runs.bad[warp] != 0;
  const uint16_t* a_lane = qs + warp * head_rows * stride + layout.ARowOffset(lane);
  for (int64_t tile = tile_begin; tile < tile_end; ++tile) {
    const int64_t tile_start = tile * kT;
    const int rows = static_cast<int>(keys - tile_start < kT ? keys - tile_start : kT);
    // Lane k < 16's running sum of key 16 r + k, round r.
    float sum_total[kT / L::kSumKeys];
#pragma unroll
    for (int r = 0; r < kT / L::kSumKeys; ++r) sum_total[r] = 0.0f;
    for (int o = 0; o < nq; ++o) {  // block-uniform: the runs and their reaches are shared
      const int64_t in_tile = runs.reach[o] - tile_start;
      if (in_tile <= 0) continue;  // not a run's owner, a bad run, or no key of it here
      const int count = in_tile < rows ? static_cast<int>(in_tile) : rows;
      __syncthreads();  // the heads are staged; the last run's keys and rows are read
      StageRunKeys(runs.table[o], runs.offset[o], tile_start, count, table_width, entries_per_block,
                   s_rows, tid, [&](auto row_of, int n) {
                     StageIndexerKeysBf16<L::kThreads, decltype(row_of), kStageBatch>(
                         ks, stride, row_of, n, dim, k_codes, k_scales, tid);
                   });
      __syncthreads();
      // Warp-uniform: this warp's query is of run o and sees a key of the
      // tile. Rows past `count` hold stale keys; their scores are not kept.
      if (my_bad || runs.owner[warp] != o || my_visible <= tile_start) continue;
      for (int pass = 0; pass < head_rows; pass += L::kHeadPass) {
        float d[2][8][4];
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
          for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
            for (int e = 0; e < 4; ++e) d[mt][nt][e] = 0.0f;
          }
        }
        const uint16_t* a_pass = a_lane + pass * stride;
#pragma unroll 2
        for (int c = 0; c < dim; c += 16) {
          uint32_t a[2][4];
          LdMatrixX4(a[0], a_pass + c);
          LdMatrixX4(a[1], a_pass + 16 * stride + c);
#pragma unroll
          for (int p = 0; p < 4; ++p) {
            uint32_t b[4];  // b0, b1 of n tile 2 p, then of 2 p + 1
            LdMatrixX4(b, ks + layout.BRowOffset(lane, p) + c);
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              MmaBf16M16N8K16(d[0][2 * p + h], a[0], b[2 * h], b[2 * h + 1]);
              MmaBf16M16N8K16(d[1][2 * p + h], a[1], b[2 * h], b[2 * h + 1]);
            }
          }
        }
        // The terms, in place: d[mt][nt][e] is head pass + MmaHead(lane, mt,
        // e), key MmaKey(lane, nt, e).
        MmaTermsInPlace<kRoundBf16>(d, ws + warp * head_rows + pass, lane);
        SmemHeadSum(d, sum_scratch, sum_total, lane, heads, pass);
      }
    }
    // Lane k < 16 writes keys 16 r + k of its warp's query.
    if (warp < nq) {
      WriteSmemSumScores(out + (s0 + warp) * keys, lane, rows, tile_start, my_visible, my_bad,
                         sum_total, round);
    }
  }
}

}  // namespace weir::kernels::cuda

#endif  // WEIR_KERNELS_CUDA_ATTENTION_INDEXER_SCORE_SHARED_KEYS_BF16_CUH_
