// kernels/cuda/dense/split_reduce.cuh — the second kernel of a split-K
// product (Fp8BlockGemm, Bf16Gemm): each output element of a group is its
// splits' fp32 partials added in split order, then rounded as the output asks.
// Device code only, no host dependencies.
#ifndef WEIR_KERNELS_CUDA_DENSE_SPLIT_REDUCE_CUH_
#define WEIR_KERNELS_CUDA_DENSE_SPLIT_REDUCE_CUH_

#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/cuda/grid_dependency.cuh"
#include "kernels/cuda/rounding.cuh"

namespace weir::kernels::cuda::dense {

// partial: [groups][splits][mn]; y: group g at g * y_stride, bf16 or fp32
// (rounded to bf16 when round_f32). One thread per element of a group,
// blockIdx.y the group. `static`: each launcher's translation unit has its
// own copy.
static __global__ void SplitReduceKernel(const float* __restrict__ partial, void* y, int64_t mn,
                                         int splits, int64_t y_stride, bool bf16_out,
                                         bool round_f32) {
  GridDependencyPrologue();
  const int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= mn) return;
  const int64_t g = blockIdx.y;
  const float* part = partial + g * splits * mn + e;
  float v = part[0];
  for (int s = 1; s < splits; ++s) v = __fadd_rn(v, part[s * mn]);
  if (bf16_out) {
    static_cast<__nv_bfloat16*>(y)[g * y_stride + e] = __float2bfloat16_rn(v);
  } else {
    static_cast<float*>(y)[g * y_stride + e] = round_f32 ? RoundToBf16(v) : v;
  }
}

// Launches SplitReduceKernel over `groups` groups of `mn` elements (the
// split products' second kernel, as both launchers run it).
static inline void LaunchSplitReduce(const float* partial, void* y, int64_t mn, int64_t groups,
                                     int splits, int64_t y_stride, bool bf16_out, bool round_f32,
                                     cudaStream_t stream) {
  constexpr int kThreads = 256;
  SplitReduceKernel<<<dim3(static_cast<unsigned>((mn + kThreads - 1) / kThreads),
                           static_cast<unsigned>(groups)),
                      kThreads, 0, stream>>>(partial, y, mn, splits, y_stride, bf16_out, round_f32);
}

}  // namespace weir::kernels::cuda::dense

#endif  // WEIR_KERNELS_CUDA_DENSE_SPLIT_REDUCE_CUH_
