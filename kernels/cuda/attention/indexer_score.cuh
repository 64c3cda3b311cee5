// kernels/cuda/attention/indexer_score.cuh — device code of IndexerScore.
// No host dependencies.
#ifndef WEIR_KERNELS_CUDA_ATTENTION_INDEXER_SCORE_CUH_
#define WEIR_KERNELS_CUDA_ATTENTION_INDEXER_SCORE_CUH_

#include <cstdint>

#include "kernels/cuda/dense/fake_quant.cuh"
#include "kernels/cuda/grid_dependency.cuh"
#include "kernels/cuda/rounding.cuh"

namespace weir::kernels::cuda {

inline constexpr int kIndexerKeyTile = 32;  // keys per block: lane i of every warp has key i
inline constexpr int kIndexerWarps = 8;
inline constexpr int kIndexerThreads = kIndexerWarps * 32;
inline constexpr int kIndexerChains = 4;  // heads a thread runs at once (independent sums)

// Stages `count` keys into `tile` (rows `stride` floats apart): key i is pool
// row row_of(i) of the fp32 keys k, or (k_codes non-null) of the MXFP4 keys,
// eight elements a step from one word of codes and its E8M0 scale
// (Mxfp4Value: exact); a negative row stages NaN. Thread `tid` of kThreads
// takes every kThreads-th step. Every IndexerScore kernel stages through it.
// kBatch > 1: a thread issues the loads of kBatch of its steps before it
// converts and stores any of them (one memory latency a batch, not a step);
// the same values land in the same places.
template <int kThreads, typename RowOf, int kBatch = 1>
__device__ __forceinline__ void StageIndexerKeys(float* tile, int stride, RowOf row_of, int count,
                                                 int dim, const float* __restrict__ k,
                                                 const uint8_t* __restrict__ k_codes,
                                                 const uint8_t* __restrict__ k_scales, int tid) {
  if constexpr (kBatch > 1) {
    const bool mxfp4 = k_codes != nullptr;
    const int step_width = mxfp4 ? 8 : 1;  // elements a step
    const int steps_per_row = dim / step_width, steps = count * steps_per_row;
    const uint32_t* code_words = reinterpret_cast<const uint32_t*>(k_codes);
    for (int base = tid; base < steps; base += kThreads * kBatch) {
      uint32_t loaded[kBatch], scale[kBatch];
      int64_t rows[kBatch];
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        const int e = base + b * kThreads;
        rows[b] = -1;
        loaded[b] = 0x7fffffffu;  // NaN: what a negative row stages
        scale[b] = 0;
        if (e >= steps) continue;
        const int r = e / steps_per_row, c = (e % steps_per_row) * step_width;
        rows[b] = row_of(r);
        if (rows[b] < 0) continue;
        const int64_t at = rows[b] * dim + c;
        if (mxfp4) {
          loaded[b] = code_words[at / 8];
          scale[b] = k_scales[at / 32];
        } else {
          loaded[b] = __float_as_uint(k[at]);
        }
      }
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        const int e = base + b * kThreads;
        if (e >= steps) continue;
        const int r = e / steps_per_row, c = (e % steps_per_row) * step_width;
        float* dst = tile + r * stride + c;
        if (!mxfp4) {
          dst[0] = __uint_as_float(loaded[b]);
        } else if (rows[b] < 0) {
#pragma unroll
          for (int j = 0; j < 8; ++j) dst[j] = __int_as_float(0x7fffffff);
        } else {
#pragma unroll
          for (int j = 0; j < 8; ++j) dst[j] = Mxfp4Value((loaded[b] >> (4 * j)) & 0xFu, scale[b]);
        }
      }
    }
    return;
  }
  if (k_codes != nullptr) {
    const int words = dim / 8;
    const uint32_t* code_words = reinterpret_cast<const uint32_t*>(k_codes);
    for (int e = tid; e < count * words; e += kThreads) {
      const int r = e / words, c = (e % words) * 8;
      float* dst = tile + r * stride + c;
      const int64_t row = row_of(r);
      if (row < 0) {
#pragma unroll
        for (int j = 0; j < 8; ++j) dst[j] = __int_as_float(0x7fffffff);
        continue;
      }
      const int64_t at = row * dim + c;
      const uint32_t word = code_words[at / 8];
      const uint32_t scale = k_scales[at / 32];
#pragma unroll
      for (int j = 0; j < 8; ++j) dst[j] = Mxfp4Value((word >> (4 * j)) & 0xFu, scale);
    }
    return;
  }
  for (int e = tid; e < count * dim; e += kThreads) {
    const int r = e / dim, c = e % dim;
    const int64_t row = row_of(r);
    tile[r * stride + c] = row < 0 ? __int_as_float(0x7fffffff) : k[row * dim + c];
  }
}

// Block (x = key tile, y = first query): for each query s = y, y + gridDim.y,
// ... the query's heads are staged in shared memory; warp w takes heads
// kIndexerChains w .. + kIndexerChains - 1, then the next such group
// kIndexerWarps groups on, and lane i runs the dots of those heads with key
// tile_start + i side by side (each dot's channels ascending, as the CPU's
// loop), storing each head's rounded, weighted term; then lane i of warp 0
// adds its key's terms in head order. So every product and sum is the CPU's,
// in its order, and the heads no longer run one after another on one thread
// (a V4.1 decode step at batch 1 spent 45 us a call there).
// The tile of keys is staged too (row stride dim + 1, so a warp's threads hit
// distinct banks): once for all queries when key_offset is null, else per
// query from rows key_offset[s] + tile_start + i, and then only the rows below
// visible_len[s] (the others are never read, so a query's keys need to exist
// only up to its visible length). A negative key_offset[s] reads nothing and
// scores that query's visible keys NaN. With block_table the rows come through
// query s's table row (paged pools); a negative table_slot[s] scores like a
// negative offset, a key whose block is negative (or past table_width) is
// staged as NaN.
// With k_codes / k_scales (and k null) the keys are MXFP4 (e2m1 codes two a
// byte, an E8M0 scale per 32; dim % 32 == 0, the codes 4-byte aligned) and
// the tile holds their exact fp32 values (Mxfp4Value), so the scores equal
// those of the fp32 keys FakeQuant kMxfp4 gives.
// Dynamic shared memory: kIndexerKeyTile * (dim + 1) + heads * dim floats,
// then heads * kIndexerKeyTile floats of terms (rounded up to an even count),
// then kIndexerKeyTile int64 rows.
template <bool kRoundBf16>
__global__ void IndexerScoreKernel(
    const float* __restrict__ q, const float* __restrict__ k, const uint8_t* __restrict__ k_codes,
    const uint8_t* __restrict__ k_scales, const float* __restrict__ weights,
    const int64_t* __restrict__ visible_len, const int64_t* __restrict__ key_offset,
    const int32_t* __restrict__ block_table, const int32_t* __restrict__ table_slot,
    int table_width, int entries_per_block, float* __restrict__ out, int64_t queries, int heads,
    int dim, int64_t keys, bool q_mxfp4, float weights_factor) {
  GridDependencyPrologue();
  extern __shared__ float shared[];
  float* tile = shared;                                 // [kIndexerKeyTile, dim + 1]
  float* qs = shared + kIndexerKeyTile * (dim + 1);     // [heads, dim]
  float* terms = qs + heads * dim;                      // [heads, kIndexerKeyTile]
  // Paged keys: the pool row of each key of the tile, [kIndexerKeyTile].
  int64_t* tile_rows = reinterpret_cast<int64_t*>(
      shared + ((kIndexerKeyTile * (dim + 1) + heads * dim + heads * kIndexerKeyTile + 1) & ~1));
  const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
  const int64_t tile_start = static_cast<int64_t>(blockIdx.x) * kIndexerKeyTile;
  const int rows = static_cast<int>(keys - tile_start < kIndexerKeyTile ? keys - tile_start
                                                                     : kIndexerKeyTile);
  // Stages `count` keys of the tile; key i of the tile is pool row
  // row_of(i), a negative row loading NaN.
  auto load_tile = [&](auto row_of, int count) {
    StageIndexerKeys<kIndexerThreads>(tile, dim + 1, row_of, count, dim, k, k_codes, k_scales,
                                      static_cast<int>(threadIdx.x));
  };
  const bool per_query = key_offset != nullptr || block_table != nullptr;
  if (!per_query) load_tile([&](int i) -> int64_t { return tile_start + i; }, rows);
  auto round = [](float x) { return kRoundBf16 ? RoundToBf16(x) : x; };
  const int64_t t = tile_start + lane;  // this lane's key
  const float* kr = tile + lane * (dim + 1);
  for (int64_t s = blockIdx.y; s < queries; s += gridDim.y) {
    const int64_t v = visible_len[s];
    const int64_t visible = v < 0 ? 0 : (v > keys ? keys : v);
    const bool any_visible = tile_start < visible;  // block-uniform
    const int64_t offset = key_offset == nullptr ? 0 : key_offset[s];
    const int32_t* table = block_table == nullptr || table_slot[s] < 0
                               ? nullptr
                               : block_table + static_cast<int64_t>(table_slot[s]) * table_width;
    const bool bad_offset = offset < 0 || (block_table != nullptr && table == nullptr);
    __syncthreads();  // the tile is loaded; the previous query's tile and heads are used up
    if (any_visible && !bad_offset) {
      if (per_query) {
        const int64_t visible_in_tile = visible - tile_start;
        const int count = visible_in_tile < rows ? static_cast<int>(visible_in_tile) : rows;
        if (table != nullptr) {  // key t: entry t % e of the slot's block t / e
          if (threadIdx.x < count) {
            const int64_t t = tile_start + threadIdx.x, j = t / entries_per_block;
            const int32_t b = j < table_width ? table[j] : -1;
            tile_rows[threadIdx.x] =
                b < 0 ? -1 : static_cast<int64_t>(b) * entries_per_block + t % entries_per_block;
          }
          __syncthreads();  // block-uniform: any_visible and bad_offset are
          load_tile([&](int i) -> int64_t { return tile_rows[i]; }, count);
        } else {
          load_tile([&](int i) -> int64_t { return offset + tile_start + i; }, count);
        }
      }
      // Whole warps a pass (heads * dim % 32 == 0 with q_mxfp4): a 32-block
      // of q lies in one warp's consecutive lanes, as in FakeQuantKernel.
      for (int e = threadIdx.x; e < heads * dim; e += kIndexerThreads) {
        float v = q[s * heads * dim + e];
        if (q_mxfp4) {
          float amax;
          int nonfinite;
          dense::BlockAmax<32>(v, amax, nonfinite);
          v = dense::FakeQuantValue<dense::DeviceFakeQuantFormat::kMxfp4>(v, amax, nonfinite);
        }
        qs[e] = v;
      }
    }
    __syncthreads();
    // Block-uniform: the heads' terms of the tile's keys (a key past the
    // visible ones, or of a bad offset, computes garbage that is not used).
    if (any_visible && !bad_offset) {
      for (int h0 = warp * kIndexerChains; h0 < heads; h0 += kIndexerWarps * kIndexerChains) {
        float dot[kIndexerChains];
#pragma unroll
        for (int j = 0; j < kIndexerChains; ++j) dot[j] = 0.0f;
        if (h0 + kIndexerChains <= heads) {
          for (int c = 0; c < dim; ++c) {
            const float kc = kr[c];
#pragma unroll
            for (int j = 0; j < kIndexerChains; ++j) {
              dot[j] = __fadd_rn(dot[j], __fmul_rn(qs[(h0 + j) * dim + c], kc));
            }
          }
        } else {  // the last heads, fewer than kIndexerChains
#pragma unroll
          for (int j = 0; j < kIndexerChains; ++j) {
            if (h0 + j >= heads) break;
            for (int c = 0; c < dim; ++c) {
              dot[j] = __fadd_rn(dot[j], __fmul_rn(qs[(h0 + j) * dim + c], kr[c]));
            }
          }
        }
#pragma unroll
        for (int j = 0; j < kIndexerChains; ++j) {
          if (h0 + j >= heads) break;
          const float d = round(dot[j]);
          const float relu = d < 0.0f ? 0.0f : d;  // std::max(d, 0.0f)
          float w = weights[s * heads + h0 + j];
          if (weights_factor != 0.0f) w = round(__fmul_rn(w, weights_factor));  // decode's Scale
          terms[(h0 + j) * kIndexerKeyTile + lane] = round(__fmul_rn(relu, w));
        }
      }
    }
    __syncthreads();
    if (warp != 0 || t >= keys) continue;
    if (t >= visible) {
      out[s * keys + t] = -INFINITY;
      continue;
    }
    if (bad_offset) {
      out[s * keys + t] = __int_as_float(0x7fffffff);
      continue;
    }
    float total = 0.0f;
    for (int h = 0; h < heads; ++h) total = __fadd_rn(total, terms[h * kIndexerKeyTile + lane]);
    out[s * keys + t] = round(total);
  }
}

}  // namespace weir::kernels::cuda

#endif  // WEIR_KERNELS_CUDA_ATTENTION_INDEXER_SCORE_CUH_
