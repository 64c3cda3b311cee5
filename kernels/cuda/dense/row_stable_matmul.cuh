// kernels/cuda/dense/row_stable_matmul.cuh — device code of RowStableMatmul.
// No host dependencies.
#ifndef WEIR_KERNELS_CUDA_DENSE_ROW_STABLE_MATMUL_CUH_
#define WEIR_KERNELS_CUDA_DENSE_ROW_STABLE_MATMUL_CUH_

#include <cstdint>

#include "kernels/common/row_stable.h"
#include "kernels/cuda/grid_dependency.cuh"

namespace weir::kernels::cuda::dense {

// Weight source of RowStableMatmulTileOf: fp32 W [out, in], row-major.
// A source fetches the stored form (Raw) of kVector consecutive elements of a
// row (k a multiple of kVector) when the slice is prefetched, and decodes
// element j of it to fp32 only when the slice is staged in shared memory, so
// the prefetch's loads stay in flight during the previous slice's products
// whatever the storage format. Zero() decodes to +0 everywhere.
struct Fp32WeightRows {
  static constexpr int kVector = 1;
  using Raw = float;
  const float* __restrict__ w;
  int64_t in;
  __device__ __forceinline__ Raw Fetch(int64_t n, int64_t k) const { return w[n * in + k]; }
  __device__ __forceinline__ static Raw Zero() { return 0.0f; }
  __device__ __forceinline__ static float Decode(Raw r, int) { return r; }
};

// Every output element is computed in the row-stable order of
// kernels/common/row_stable.h (RowStableStep per term, RowStableCombine of
// the four lanes).
//
// A thread block computes a kBm x kBn tile of y, staging kBk-wide slices of x
// and W through shared memory (the next slice is prefetched into registers
// while the current one is used). Thread t owns summation lane l = t % 4 of
// kTm x kTn outputs: it accumulates k = k0 + l, k0 + l + 4, ... in ascending
// order; the four lanes of an output sit in four adjacent threads and meet in
// RowStableQuadCombine. Out-of-range k are staged as zeros on both sides
// (zero padding keeps the bits, row_stable.h), so the tail needs no special
// case. Tiling changes data movement only, never the arithmetic, so every
// configuration gives the same bits.
//
// RowStableMatmulTileOf is that block's work for the tile whose first row is
// m0 and first column n0, on x [rows, in], W [out, in], y [rows, out] (the
// caller may pass a row range of a larger x and y); every thread of the block
// must call it (it synchronizes). W is read only through `w.Fetch(n, k)` (row
// n < out, columns k .. k + kVector - 1 < in) and WeightRows::Decode, which
// give the fp32 weights: the weight values, not how they are stored,
// determine the bits of y. REQUIRES: in % WeightRows::kVector == 0. RowStableMatmulKernel and
// the grouped product (grouped_row_stable_matmul.cuh, fp32 or MXFP4 weights)
// all run it, so they compute every element with the same operations.
template <int kThreads, int kRowGroups, int kTm, int kTn, int kBk, typename WeightRows>
__device__ __forceinline__ void RowStableMatmulTileOf(const float* __restrict__ x,
                                                      const WeightRows& w,
                                                      float* __restrict__ y, int64_t rows,
                                                      int64_t out, int64_t in, int64_t m0,
                                                      int64_t n0) {
  constexpr int kColGroups = kThreads / 4 / kRowGroups;
  constexpr int kBm = kRowGroups * kTm;
  constexpr int kBn = kColGroups * kTn;
  // Padding so the 8 column groups x 4 lanes of a warp hit 32 distinct banks.
  constexpr int kWStride = kBk + 4 / kTn;
  constexpr int kXLoads = kBm * kBk / kThreads;
  constexpr int kWLoads = kBn * kBk / kThreads;
  static_assert(kThreads % (4 * kRowGroups) == 0 && kColGroups % 8 == 0);
  static_assert(kTn == 1 || kTn == 2 || kTn == 4);
  static_assert(kXLoads * kThreads == kBm * kBk && kWLoads * kThreads == kBn * kBk);
  __shared__ float xs[kBm * kBk];
  __shared__ float ws[kBn * kWStride];

  const int t = threadIdx.x;
  const int lane = t & 3;
  const int group = t >> 2;
  const int col_group = group % kColGroups;
  const int row_group = group / kColGroups;

  constexpr int kV = WeightRows::kVector;
  static_assert(kWLoads % kV == 0 && kBk % kV == 0);
  constexpr int kWFetches = kWLoads / kV;
  float xr[kXLoads];
  typename WeightRows::Raw wr[kWFetches];
  auto load = [&](int64_t k0) {
#pragma unroll
    for (int q = 0; q < kXLoads; ++q) {
      const int idx = t + q * kThreads;
      const int64_t m = m0 + idx / kBk;
      const int64_t k = k0 + idx % kBk;
      xr[q] = (m < rows && k < in) ? x[m * in + k] : 0.0f;
    }
#pragma unroll
    for (int q = 0; q < kWFetches; ++q) {
      const int idx = (t + q * kThreads) * kV;  // first of kV elements of one row
      const int64_t n = n0 + idx / kBk;
      const int64_t k = k0 + idx % kBk;
      wr[q] = (n < out && k < in) ? w.Fetch(n, k) : WeightRows::Zero();
    }
  };

  float acc[kTm][kTn];
#pragma unroll
  for (int i = 0; i < kTm; ++i) {
#pragma unroll
    for (int j = 0; j < kTn; ++j) acc[i][j] = 0.0f;
  }
  load(0);
  for (int64_t k0 = 0; k0 < in; k0 += kBk) {
    __syncthreads();  // Everyone is done reading the previous slice.
#pragma unroll
    for (int q = 0; q < kXLoads; ++q) xs[t + q * kThreads] = xr[q];
#pragma unroll
    for (int q = 0; q < kWFetches; ++q) {
      const int idx = (t + q * kThreads) * kV;
#pragma unroll
      for (int j = 0; j < kV; ++j) {
        ws[(idx / kBk) * kWStride + idx % kBk + j] = WeightRows::Decode(wr[q], j);
      }
    }
    __syncthreads();
    if (k0 + kBk < in) load(k0 + kBk);
#pragma unroll 4
    for (int kk = 0; kk < kBk; kk += 4) {
      float xv[kTm];
      float wv[kTn];
#pragma unroll
      for (int i = 0; i < kTm; ++i) xv[i] = xs[(row_group * kTm + i) * kBk + kk + lane];
#pragma unroll
      for (int j = 0; j < kTn; ++j) wv[j] = ws[(col_group * kTn + j) * kWStride + kk + lane];
#pragma unroll
      for (int i = 0; i < kTm; ++i) {
#pragma unroll
        for (int j = 0; j < kTn; ++j) acc[i][j] = RowStableStep(acc[i][j], xv[i], wv[j]);
      }
    }
  }
#pragma unroll
  for (int i = 0; i < kTm; ++i) {
#pragma unroll
    for (int j = 0; j < kTn; ++j) {
      const float sum = RowStableQuadCombine(acc[i][j]);
      const int64_t m = m0 + row_group * kTm + i;
      const int64_t n = n0 + col_group * kTn + j;
      if (lane == 0 && m < rows && n < out) y[m * out + n] = sum;
    }
  }
}

// RowStableMatmulTileOf with fp32 W [out, in] at `w`.
template <int kThreads, int kRowGroups, int kTm, int kTn, int kBk>
__device__ __forceinline__ void RowStableMatmulTile(const float* __restrict__ x,
                                                    const float* __restrict__ w,
                                                    float* __restrict__ y, int64_t rows,
                                                    int64_t out, int64_t in, int64_t m0,
                                                    int64_t n0) {
  RowStableMatmulTileOf<kThreads, kRowGroups, kTm, kTn, kBk>(x, Fp32WeightRows{w, in}, y, rows,
                                                             out, in, m0, n0);
}

// Grid (ceil(rows / kBm), ceil(out / kBn)): one RowStableMatmulTile per block.
template <int kThreads, int kRowGroups, int kTm, int kTn, int kBk>
__global__ void __launch_bounds__(kThreads)
    RowStableMatmulKernel(const float* __restrict__ x, const float* __restrict__ w,
                          float* __restrict__ y, int64_t rows, int64_t out, int64_t in) {
  GridDependencyPrologue();
  constexpr int kBm = kRowGroups * kTm;
  constexpr int kBn = kThreads / 4 / kRowGroups * kTn;
  RowStableMatmulTile<kThreads, kRowGroups, kTm, kTn, kBk>(
      x, w, y, rows, out, in, static_cast<int64_t>(blockIdx.x) * kBm,
      static_cast<int64_t>(blockIdx.y) * kBn);
}

// The many-rows variant: a thread owns all four lanes of a 4 x 4 block of
// outputs (rows tr + 16 i, columns tc + 16 j of a 64 x 64 tile) and reads
// x and W four k at a time (lanes 0..3) as float4 from shared memory. Same
// arithmetic per output element as RowStableMatmulKernel.
template <int kBk>
__global__ void __launch_bounds__(256)
    RowStableMatmulTiledKernel(const float* __restrict__ x, const float* __restrict__ w,
                               float* __restrict__ y, int64_t rows, int64_t out, int64_t in) {
  GridDependencyPrologue();
  constexpr int kThreads = 256;
  constexpr int kTile = 64;
  constexpr int kStride = kBk + 4;  // 16-byte rows, 8 consecutive rows on distinct banks
  constexpr int kLoads = kTile * kBk / kThreads;
  static_assert(kBk % 4 == 0 && kLoads * kThreads == kTile * kBk);
  __shared__ __align__(16) float xs[kTile * kStride];
  __shared__ __align__(16) float ws[kTile * kStride];

  const int t = threadIdx.x;
  const int tr = t / 16;
  const int tc = t % 16;
  const int64_t m0 = static_cast<int64_t>(blockIdx.x) * kTile;
  const int64_t n0 = static_cast<int64_t>(blockIdx.y) * kTile;

  float xr[kLoads];
  float wr[kLoads];
  auto load = [&](int64_t k0) {
#pragma unroll
    for (int q = 0; q < kLoads; ++q) {
      const int idx = t + q * kThreads;
      const int64_t k = k0 + idx % kBk;
      const int64_t m = m0 + idx / kBk;
      const int64_t n = n0 + idx / kBk;
      xr[q] = (m < rows && k < in) ? x[m * in + k] : 0.0f;
      wr[q] = (n < out && k < in) ? w[n * in + k] : 0.0f;
    }
  };

  float acc[4][4][4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
#pragma unroll
      for (int l = 0; l < 4; ++l) acc[i][j][l] = 0.0f;
    }
  }
  load(0);
  for (int64_t k0 = 0; k0 < in; k0 += kBk) {
    __syncthreads();
#pragma unroll
    for (int q = 0; q < kLoads; ++q) {
      const int idx = t + q * kThreads;
      xs[(idx / kBk) * kStride + idx % kBk] = xr[q];
      ws[(idx / kBk) * kStride + idx % kBk] = wr[q];
    }
    __syncthreads();
    if (k0 + kBk < in) load(k0 + kBk);
#pragma unroll 2
    for (int kk = 0; kk < kBk; kk += 4) {
      float4 xv[4];
      float4 wv[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        xv[i] = *reinterpret_cast<const float4*>(&xs[(tr + 16 * i) * kStride + kk]);
        wv[i] = *reinterpret_cast<const float4*>(&ws[(tc + 16 * i) * kStride + kk]);
      }
#pragma unroll
      for (int i = 0; i < 4; ++i) {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          acc[i][j][0] = RowStableStep(acc[i][j][0], xv[i].x, wv[j].x);
          acc[i][j][1] = RowStableStep(acc[i][j][1], xv[i].y, wv[j].y);
          acc[i][j][2] = RowStableStep(acc[i][j][2], xv[i].z, wv[j].z);
          acc[i][j][3] = RowStableStep(acc[i][j][3], xv[i].w, wv[j].w);
        }
      }
    }
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t m = m0 + tr + 16 * i;
      const int64_t n = n0 + tc + 16 * j;
      if (m < rows && n < out) {
        y[m * out + n] = RowStableCombine(acc[i][j][0], acc[i][j][1], acc[i][j][2], acc[i][j][3]);
      }
    }
  }
}

}  // namespace weir::kernels::cuda::dense

#endif  // WEIR_KERNELS_CUDA_DENSE_ROW_STABLE_MATMUL_CUH_
