// kernels/cuda/attention/indexer_score.cuh — device code of IndexerScore.
// No host dependencies.
#ifndef WEIR_KERNELS_CUDA_ATTENTION_INDEXER_SCORE_CUH_
#define WEIR_KERNELS_CUDA_ATTENTION_INDEXER_SCORE_CUH_

#include <cstdint>

#include "kernels/cuda/attention/bf16.cuh"

namespace weir::kernels::cuda {

inline constexpr int kIndexerKeyTile = 128;  // keys per block = threads per block

// Block (x = key tile, y = first query): the tile of keys is staged in shared
// memory (row stride dim + 1, so a warp's threads hit distinct banks), then
// for each query s = y, y + gridDim.y, ... the query's heads are staged and
// thread i scores key tile_start + i. Dynamic shared memory:
// kIndexerKeyTile * (dim + 1) + heads * dim floats.
template <bool kRoundBf16>
__global__ void IndexerScoreKernel(const float* __restrict__ q, const float* __restrict__ k,
                                   const float* __restrict__ weights,
                                   const int64_t* __restrict__ visible_len,
                                   float* __restrict__ out, int64_t queries, int heads, int dim,
                                   int64_t keys) {
  extern __shared__ float shared[];
  float* tile = shared;                                 // [kIndexerKeyTile, dim + 1]
  float* qs = shared + kIndexerKeyTile * (dim + 1);     // [heads, dim]
  const int64_t tile_start = static_cast<int64_t>(blockIdx.x) * kIndexerKeyTile;
  const int rows = static_cast<int>(keys - tile_start < kIndexerKeyTile ? keys - tile_start
                                                                     : kIndexerKeyTile);
  for (int e = threadIdx.x; e < rows * dim; e += kIndexerKeyTile) {
    const int r = e / dim, c = e % dim;
    tile[r * (dim + 1) + c] = k[(tile_start + r) * dim + c];
  }
  auto round = [](float x) { return kRoundBf16 ? RoundToBf16(x) : x; };
  const int64_t t = tile_start + threadIdx.x;
  const float* kr = tile + threadIdx.x * (dim + 1);
  for (int64_t s = blockIdx.y; s < queries; s += gridDim.y) {
    const int64_t v = visible_len[s];
    const int64_t visible = v < 0 ? 0 : (v > keys ? keys : v);
    const bool any_visible = tile_start < visible;  // block-uniform
    __syncthreads();  // the tile is loaded; the previous query's heads are used up
    if (any_visible) {
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
