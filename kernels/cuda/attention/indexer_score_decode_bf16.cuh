// kernels/cuda/attention/indexer_score_decode_bf16.cuh — IndexerScore's form
// IndexerScoreForm::kDecodeMmaBf16: the bf16-staged tensor-core arithmetic of
// kSharedKeysMmaBf16 laid out for decode steps. No host dependencies.
//
// A decode step's rows each read their own sequence's keys, so the
// shared-keys forms (a block of four queries over tiles staged once for all
// four) restage every tile per query with one warp of four at work, and the
// per-query form runs its dots on the CUDA cores. Here a block takes one
// query and a range of 64-key tiles (IndexerDecodeGrid); the query's heads
// are staged once as the bf16 values of q's MXFP4 form, each tile's MXFP4
// keys once as bf16, and the four warps split the tile: warp w scores keys
// 16 w .. 16 w + 15 against every head (IndexerDecodeBf16Layout).
//
// What a (query, key) score is, and in which order it is made, is
// kSharedKeysMmaBf16's: each pass of 32 heads as mma.sync m16n8k16
// accumulators over exact bf16 operands (the same bits as the CPU's chain
// wherever a dot's exact sum fits fp32: indexer_score_shared_keys.cuh), the
// terms round(relu(round(d)) * w) with a term's two roundings one
// cvt.rn.bf16x2, and the head sum in head order through the warp's shared
// scratch (SmemHeadSumRound). Tiling moves data only.
#ifndef WEIR_KERNELS_CUDA_ATTENTION_INDEXER_SCORE_DECODE_BF16_CUH_
#define WEIR_KERNELS_CUDA_ATTENTION_INDEXER_SCORE_DECODE_BF16_CUH_

#include <cstdint>

#include "kernels/cuda/attention/indexer_score_shared_keys.cuh"
#include "kernels/cuda/attention/indexer_score_shared_keys_bf16.cuh"
#include "kernels/cuda/attention/indexer_score_shared_keys_layout.h"
#include "kernels/cuda/grid_dependency.cuh"
#include "kernels/cuda/mma_bf16.cuh"
#include "kernels/cuda/rounding.cuh"

namespace weir::kernels::cuda {

// Grid: grid.Blocks() blocks of IndexerSharedKeysLayout::kThreads; block b
// scores query grid.Query(b) against the key tiles of range grid.Range(b),
// writing every key of them (-inf past the query's visible keys, NaN for a
// bad source). Needs q_mxfp4, MXFP4 keys and dim % 32 == 0. kDim > 0 fixes
// dim. Dynamic shared memory: IndexerDecodeBf16Layout(heads, dim).bytes.
template <int kDim, bool kRoundBf16>
__global__ void __launch_bounds__(IndexerSharedKeysLayout::kThreads) IndexerScoreDecodeBf16Kernel(
    const float* __restrict__ q, const uint8_t* __restrict__ k_codes,
    const uint8_t* __restrict__ k_scales, const float* __restrict__ weights,
    const int64_t* __restrict__ visible_len, const int64_t* __restrict__ key_offset,
    const int32_t* __restrict__ block_table, const int32_t* __restrict__ table_slot,
    int table_width, int entries_per_block, float* __restrict__ out, int heads, int dim_arg,
    int64_t keys, float weights_factor, IndexerDecodeGrid grid) {
  GridDependencyPrologue();
  using L = IndexerSharedKeysLayout;
  using D = IndexerDecodeBf16Layout;
  constexpr int kT = L::kKeys;
  constexpr int kStageBatch = 8, kQBatch = 8;
  extern __shared__ __align__(16) unsigned char decode_bf16_smem[];
  const int dim = kDim > 0 ? kDim : dim_arg;
  const D layout(heads, dim);
  const int stride = layout.stride, head_rows = layout.head_rows;
  uint16_t* qs = reinterpret_cast<uint16_t*>(decode_bf16_smem + layout.q_offset);
  float* ws = reinterpret_cast<float*>(decode_bf16_smem + layout.w_offset);
  uint16_t* ks = reinterpret_cast<uint16_t*>(decode_bf16_smem + layout.k_offset);
  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid % 32, warp = tid / 32;
  float* const sum_scratch =
      reinterpret_cast<float*>(decode_bf16_smem + layout.sum_offset) + warp * L::kSumWarpFloats;
  __shared__ SharedKeysRuns<1> runs;
  __shared__ int64_t s_rows[kT];  // paged keys: the pool row of each key of the tile
  const int64_t s = grid.Query(blockIdx.x);
  const int64_t tile_begin = grid.Range(blockIdx.x) * grid.tiles_per_block;
  const int64_t tile_end = tile_begin + grid.tiles_per_block < grid.tiles
                               ? tile_begin + grid.tiles_per_block
                               : grid.tiles;
  auto round = [](float x) { return kRoundBf16 ? RoundToBf16(x) : x; };

  if (tid == 0) {
    FindSharedKeysRuns<1>(runs, s, 1, visible_len, key_offset, block_table, table_slot, table_width,
                          keys);
  }
  __syncthreads();
  const int64_t visible = runs.visible[0];
  const bool bad = runs.bad[0] != 0;
  const int64_t reach = runs.reach[0];  // visible; 0 for a bad source
  if (reach > tile_begin * kT) {        // block-uniform
    // The query's heads as the bf16 values of their MXFP4 form at rows h,
    // and its weights (the four warps take the rows' 32-blocks in turn). No
    // barrier here: the first tile begins with one.
    StageSharedKeysHeads<L::kQueries, L::kThreads, kQBatch>(
        q, weights, ws, s, 1, heads, head_rows, dim, /*q_mxfp4=*/true, weights_factor, round, tid,
        [&](int, int h, int c, float v) { qs[h * stride + c] = Bf16RnBits(v); });
  }

  const uint16_t* a_lane = qs + IndexerSharedKeysBf16Layout::ARowOffsetAt(stride, lane);
  const uint16_t* b_lane = ks + IndexerSharedKeysBf16Layout::BRowOffsetAt(stride, lane, warp);
  float* const row = out + s * keys;
  for (int64_t tile = tile_begin; tile < tile_end; ++tile) {
    const int64_t tile_start = tile * kT;
    const int rows = static_cast<int>(keys - tile_start < kT ? keys - tile_start : kT);
    float total = 0.0f;  // lane k < 16: key 16 warp + k
    const int64_t in_tile = reach - tile_start;
    if (in_tile > 0) {  // block-uniform
      const int count = in_tile < rows ? static_cast<int>(in_tile) : rows;
      __syncthreads();  // the heads are staged; the last tile's keys are read
      StageRunKeys(runs.table[0], runs.offset[0], tile_start, count, table_width, entries_per_block,
                   s_rows, tid, [&](auto row_of, int n) {
                     StageIndexerKeysBf16<L::kThreads, decltype(row_of), kStageBatch>(
                         ks, stride, row_of, n, dim, k_codes, k_scales, tid);
                   });
      __syncthreads();
      // Warp-uniform: some key of this warp's 16 is visible. Rows past
      // `count` hold stale keys; their scores are not kept.
      if (visible > tile_start + D::kWarpKeys * warp) {
        for (int pass = 0; pass < head_rows; pass += L::kHeadPass) {
          float d[2][2][4];
#pragma unroll
          for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
            for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
              for (int e = 0; e < 4; ++e) d[mt][nt][e] = 0.0f;
            }
          }
          const uint16_t* a_pass = a_lane + pass * stride;
#pragma unroll 4
          for (int c = 0; c < dim; c += 16) {
            uint32_t a[2][4], b[4];  // b: b0, b1 of n tile 2 warp, then of 2 warp + 1
            LdMatrixX4(a[0], a_pass + c);
            LdMatrixX4(a[1], a_pass + 16 * stride + c);
            LdMatrixX4(b, b_lane + c);
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              MmaBf16M16N8K16(d[0][h], a[0], b[2 * h], b[2 * h + 1]);
              MmaBf16M16N8K16(d[1][h], a[1], b[2 * h], b[2 * h + 1]);
            }
          }
          // The terms, in place: d[mt][nt][e] is head pass + MmaHead(lane,
          // mt, e), key 16 warp + 8 nt + 2 (lane & 3) + (e & 1).
          MmaTermsInPlace<kRoundBf16>(d, ws + pass, lane);
          SmemHeadSumRound([&](int mt, int nt, int e) { return d[mt][nt][e]; }, sum_scratch, total,
                           lane, heads, pass);
        }
      }
    }
    // Lane k < 16 writes key 16 warp + k of the tile.
    if (lane < D::kWarpKeys) {
      const int key = D::kWarpKeys * warp + lane;
      if (key < rows) {
        const int64_t tk = tile_start + key;
        row[tk] = tk >= visible ? -INFINITY : bad ? __int_as_float(0x7fffffff) : round(total);
      }
    }
  }
}

}  // namespace weir::kernels::cuda

#endif  // WEIR_KERNELS_CUDA_ATTENTION_INDEXER_SCORE_DECODE_BF16_CUH_
