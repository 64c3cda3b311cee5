// kernels/cuda/attention/indexer_score.cuh — device code of IndexerScore.
// No host dependencies.
#ifndef WEIR_KERNELS_CUDA_ATTENTION_INDEXER_SCORE_CUH_
#define WEIR_KERNELS_CUDA_ATTENTION_INDEXER_SCORE_CUH_

#include <cstdint>

#include "kernels/cuda/grid_dependency.cuh"
#include "kernels/cuda/rounding.cuh"

namespace weir::kernels::cuda {

inline constexpr int kIndexerKeyTile = 128;  // keys per block = threads per block

// Block (x = key tile, y = first query): for each query s = y, y + gridDim.y,
// ... the query's heads are staged in shared memory and thread i scores key
// tile_start + i. The tile of keys is staged too (row stride dim + 1, so a
// warp's threads hit distinct banks): once for all queries when key_offset is
// null, else per query from rows key_offset[s] + tile_start + i, and then
// only the rows below visible_len[s] (the others are never read, so a
// query's keys need to exist only up to its visible length). A negative
// key_offset[s] reads nothing and scores that query's visible keys NaN.
// With k_codes / k_scales (and k null) the keys are MXFP4 (e2m1 codes two a
// byte, an E8M0 scale per 32; dim % 32 == 0, the codes 4-byte aligned) and
// the tile holds their exact fp32 values (Mxfp4Value), so the scores equal
// those of the fp32 keys FakeQuant kMxfp4 gives.
// Dynamic shared memory: kIndexerKeyTile * (dim + 1) + heads * dim floats.
template <bool kRoundBf16>
__global__ void IndexerScoreKernel(const float* __restrict__ q, const float* __restrict__ k,
                                   const uint8_t* __restrict__ k_codes,
                                   const uint8_t* __restrict__ k_scales,
                                   const float* __restrict__ weights,
                                   const int64_t* __restrict__ visible_len,
                                   const int64_t* __restrict__ key_offset, float* __restrict__ out,
                                   int64_t queries, int heads, int dim, int64_t keys) {
  GridDependencyPrologue();
  extern __shared__ float shared[];
  float* tile = shared;                                 // [kIndexerKeyTile, dim + 1]
  float* qs = shared + kIndexerKeyTile * (dim + 1);     // [heads, dim]
  const int64_t tile_start = static_cast<int64_t>(blockIdx.x) * kIndexerKeyTile;
  const int rows = static_cast<int>(keys - tile_start < kIndexerKeyTile ? keys - tile_start
                                                                     : kIndexerKeyTile);
  auto load_tile = [&](int64_t first_key, int count) {
    if (k_codes != nullptr) {  // eight elements (one word of codes) a step
      const int words = dim / 8;
      const uint32_t* code_words = reinterpret_cast<const uint32_t*>(k_codes);
      for (int e = threadIdx.x; e < count * words; e += kIndexerKeyTile) {
        const int r = e / words, c = (e % words) * 8;
        const int64_t at = (first_key + r) * dim + c;
        const uint32_t word = code_words[at / 8];
        const uint32_t scale = k_scales[at / 32];
        float* dst = tile + r * (dim + 1) + c;
#pragma unroll
        for (int j = 0; j < 8; ++j) dst[j] = Mxfp4Value((word >> (4 * j)) & 0xFu, scale);
      }
      return;
    }
    for (int e = threadIdx.x; e < count * dim; e += kIndexerKeyTile) {
      const int r = e / dim, c = e % dim;
      tile[r * (dim + 1) + c] = k[(first_key + r) * dim + c];
    }
  };
  if (key_offset == nullptr) load_tile(tile_start, rows);
  auto round = [](float x) { return kRoundBf16 ? RoundToBf16(x) : x; };
  const int64_t t = tile_start + threadIdx.x;
  const float* kr = tile + threadIdx.x * (dim + 1);
  for (int64_t s = blockIdx.y; s < queries; s += gridDim.y) {
    const int64_t v = visible_len[s];
    const int64_t visible = v < 0 ? 0 : (v > keys ? keys : v);
    const bool any_visible = tile_start < visible;  // block-uniform
    const int64_t offset = key_offset == nullptr ? 0 : key_offset[s];
    const bool bad_offset = offset < 0;             // block-uniform
    __syncthreads();  // the tile is loaded; the previous query's tile and heads are used up
    if (any_visible && !bad_offset) {
      if (key_offset != nullptr) {
        const int64_t visible_in_tile = visible - tile_start;
        load_tile(offset + tile_start,
                  visible_in_tile < rows ? static_cast<int>(visible_in_tile) : rows);
      }
      for (int e = threadIdx.x; e < heads * dim; e += kIndexerKeyTile) {
        qs[e] = q[s * heads * dim + e];
      }
    }
    __syncthreads();
    if (t >= keys) continue;
    if (t >= visible) {
      out[s * keys + t] = -INFINITY;
      continue;
    }
    if (bad_offset) {
      out[s * keys + t] = __int_as_float(0x7fffffff);
      continue;
    }
    float total = 0.0f;
    for (int h = 0; h < heads; ++h) {
      const float* qh = qs + h * dim;
      float dot = 0.0f;
      for (int c = 0; c < dim; ++c) dot = __fadd_rn(dot, __fmul_rn(qh[c], kr[c]));
      const float d = round(dot);
      const float relu = d < 0.0f ? 0.0f : d;  // std::max(d, 0.0f)
      total = __fadd_rn(total, round(__fmul_rn(relu, weights[s * heads + h])));
    }
    out[s * keys + t] = round(total);
  }
}

}  // namespace weir::kernels::cuda

#endif  // WEIR_KERNELS_CUDA_ATTENTION_INDEXER_SCORE_CUH_
