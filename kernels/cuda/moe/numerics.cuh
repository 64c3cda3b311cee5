// kernels/cuda/moe/numerics.cuh — device arithmetic shared by the kernels of
// this package, written to reproduce the CPU reference's roundings (no host
// dependencies).
//
// The CPU reference is compiled without FMA contraction, so every "a * b + c"
// there is two roundings; device code that must match it uses the explicit
// __fmul_rn / __fadd_rn intrinsics (nvcc would otherwise fuse them).
#ifndef WEIR_KERNELS_CUDA_MOE_NUMERICS_CUH_
#define WEIR_KERNELS_CUDA_MOE_NUMERICS_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "kernels/common/fmath.h"
#include "kernels/cuda/rounding.cuh"

namespace weir::kernels::cuda::moe {

// exp(x) as kernels/common/fmath.h computes it (the CPU kernels use the same
// function, so results are bit-identical); within 1 ulp of the exact value.
__device__ __forceinline__ float ExpF(float x) { return ::weir::kernels::fmath::ExpF(x); }

// 1 / (1 + exp(-v)), the CPU's fmath::SigmoidF.
__device__ __forceinline__ float SigmoidF(float v) {
  return ::weir::kernels::fmath::SigmoidF(v);
}

// FP8 e4m3 + UE8M0 quantize->dequantize of one block of 32 values held one
// per lane of a full warp (every lane must call it). Same rules as
// kernels/cpu/quant.h FakeQuantFp8: s = 2^ceil(log2(max(amax, 1e-4) * fl(1/448))),
// q = e4m3(clamp(v / s, +-448)), value q * s; a block holding NaN or Inf
// becomes all NaN.
__device__ __forceinline__ float Fp8FakeQuantWarp(float v) {
  float amax = fabsf(v);
  for (int offset = 16; offset > 0; offset /= 2) {
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, offset));
  }
  if (!__all_sync(0xffffffffu, isfinite(v))) return __uint_as_float(0x7FC00000u);
  const float inv448 = static_cast<float>(1.0 / 448.0);
  const float s = E8m0ToFloat(Ue8m0CeilCode(__fmul_rn(fmaxf(amax, 1e-4f), inv448)));
  const float q = fminf(fmaxf(__fdiv_rn(v, s), -448.0f), 448.0f);
  const uint8_t c = FloatToE4m3(q);
  return __fmul_rn(E4m3ToFloat(c), s);
}

// Sum of a float over a full warp (xor butterfly: every lane gets the sum).
__device__ __forceinline__ float WarpSum(float v) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

__device__ __forceinline__ double WarpSum(double v) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// Sum over a block of kThreads threads; every thread gets the result.
// `scratch` is shared memory of kThreads / 32 elements. Fixed order.
template <int kThreads, typename T>
__device__ __forceinline__ T BlockSum(T v, T* scratch) {
  v = WarpSum(v);
  if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = v;
  __syncthreads();
  T total = 0;
  for (int w = 0; w < kThreads / 32; ++w) total += scratch[w];
  __syncthreads();  // scratch may be reused right after
  return total;
}

}  // namespace weir::kernels::cuda::moe

#endif  // WEIR_KERNELS_CUDA_MOE_NUMERICS_CUH_
