// kernels/cuda/decode/dot_rows.cuh — the DotRows kernel (dot_rows.h).

#ifndef WEIR_KERNELS_CUDA_DECODE_DOT_ROWS_CUH_
#define WEIR_KERNELS_CUDA_DECODE_DOT_ROWS_CUH_

#include <cstdint>

namespace weir::kernels::cuda::decode {

inline constexpr int kDotRowsWarps = 8;
inline constexpr int kDotRowsChunk = 128;  // elements of K per warp step (4 per lane)

// One CTA: output column blockIdx.x for rows [blockIdx.y * R, +R).
template <int R>
__global__ void __launch_bounds__(kDotRowsWarps * 32)
    DotRowsKernel(const float* __restrict__ x, const float* __restrict__ w, float* y,
                  int64_t rows, int64_t out, int64_t k) {
  __shared__ float partial[kDotRowsWarps][R];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t j = blockIdx.x;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * R;
  const int live = static_cast<int>(rows - r0 < R ? rows - r0 : R);
  float acc[R];
#pragma unroll
  for (int r = 0; r < R; ++r) acc[r] = 0.0f;
  const float* wr = w + j * k;
  for (int64_t c = static_cast<int64_t>(warp) * kDotRowsChunk + 4 * lane; c < k;
       c += kDotRowsWarps * kDotRowsChunk) {
    const float4 wv = *reinterpret_cast<const float4*>(wr + c);
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (r < live) {
        const float4 xv = *reinterpret_cast<const float4*>(x + (r0 + r) * k + c);
        float a = acc[r];
        a = fmaf(xv.x, wv.x, a);
        a = fmaf(xv.y, wv.y, a);
        a = fmaf(xv.z, wv.z, a);
        a = fmaf(xv.w, wv.w, a);
        acc[r] = a;
      }
    }
  }
  // k % 4 == 0 but not necessarily % 128: the loop above covers every
  // element (a lane's 4 elements are all in range or all out).
#pragma unroll
  for (int r = 0; r < R; ++r) {
    float v = acc[r];
    v += __shfl_xor_sync(0xffffffffu, v, 16);
    v += __shfl_xor_sync(0xffffffffu, v, 8);
    v += __shfl_xor_sync(0xffffffffu, v, 4);
    v += __shfl_xor_sync(0xffffffffu, v, 2);
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    if (lane == 0) partial[warp][r] = v;
  }
  __syncthreads();
  if (threadIdx.x < live) {
    const int r = threadIdx.x;
    float s = partial[0][r];
#pragma unroll
    for (int q = 1; q < kDotRowsWarps; ++q) s += partial[q][r];
    y[(r0 + r) * out + j] = s;
  }
}

// RowStableDot: thread 4e + l of the grid sums lane l of output element e
// (row e / out, column e % out); the quad then combines (l0 + l1) + (l2 + l3).
__global__ void RowStableDotKernel(const float* __restrict__ x, const float* __restrict__ w,
                                   float* y, int64_t rows, int64_t out, int64_t k) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t e = t / 4;
  const int l = static_cast<int>(t % 4);
  const bool valid = e < rows * out;
  float acc = 0.0f;
  if (valid) {
    const float* xr = x + (e / out) * k;
    const float* wr = w + (e % out) * k;
    for (int64_t c = l; c < k; c += 4) acc = __fadd_rn(acc, __fmul_rn(xr[c], wr[c]));
  }
  // Every thread of the warp takes part in the shuffles (blocks are whole warps).
  const float pair = __fadd_rn(acc, __shfl_xor_sync(0xffffffffu, acc, 1));  // l0+l1, l2+l3
  const float other = __shfl_xor_sync(0xffffffffu, pair, 2);
  if (valid && l == 0) y[e] = __fadd_rn(pair, other);
}

}  // namespace weir::kernels::cuda::decode

#endif  // WEIR_KERNELS_CUDA_DECODE_DOT_ROWS_CUH_
