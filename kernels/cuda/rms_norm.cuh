// kernels/cuda/rms_norm.cuh — device code of RmsNorm. No host dependencies.
#ifndef WEIR_KERNELS_CUDA_RMS_NORM_CUH_
#define WEIR_KERNELS_CUDA_RMS_NORM_CUH_

#include <cstdint>

namespace weir::kernels::cuda {

// One block per row; float4 loads; warp shuffles then shared memory.
template <int kThreads>
__global__ void RmsNormKernel(const float* __restrict__ x, const float* __restrict__ weight,
                              float* out, int64_t dim, float eps) {
  const int64_t row = blockIdx.x;
  const float4* in4 = reinterpret_cast<const float4*>(x + row * dim);
  const int64_t n4 = dim / 4;
  float sum = 0.0f;
  for (int64_t i = threadIdx.x; i < n4; i += kThreads) {
    const float4 v = in4[i];
    sum += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
  }
  for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  __shared__ float warp_sums[kThreads / 32];
  __shared__ float inv_rms;
  if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = sum;
  __syncthreads();
  if (threadIdx.x == 0) {
    float total = 0.0f;
    for (int w = 0; w < kThreads / 32; ++w) total += warp_sums[w];
    inv_rms = 1.0f / sqrtf(total / static_cast<float>(dim) + eps);
  }
  __syncthreads();
  float4* out4 = reinterpret_cast<float4*>(out + row * dim);
  const float4* w4 = reinterpret_cast<const float4*>(weight);
  for (int64_t i = threadIdx.x; i < n4; i += kThreads) {
    float4 v = in4[i];
    const float4 w = weight != nullptr ? w4[i] : make_float4(1.f, 1.f, 1.f, 1.f);
    v.x = w.x * (v.x * inv_rms);
    v.y = w.y * (v.y * inv_rms);
    v.z = w.z * (v.z * inv_rms);
    v.w = w.w * (v.w * inv_rms);
    out4[i] = v;
  }
}

}  // namespace weir::kernels::cuda

#endif  // WEIR_KERNELS_CUDA_RMS_NORM_CUH_
