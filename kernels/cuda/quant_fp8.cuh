// kernels/cuda/quant_fp8.cuh — device code of QuantizeFp8. No host dependencies.
#ifndef WEIR_KERNELS_CUDA_QUANT_FP8_CUH_
#define WEIR_KERNELS_CUDA_QUANT_FP8_CUH_

#include <cuda_fp8.h>

#include <cstdint>

#include "kernels/cuda/grid_dependency.cuh"

namespace weir::kernels::cuda {

// 2^ceil(log2(v)) as an E8M0 code, from the fp32 bits (v > 0, finite).
__device__ __forceinline__ uint32_t Ue8m0CeilCode(float v) {
  const uint32_t bits = __float_as_uint(v);
  const uint32_t code = ((bits >> 23) & 0xFFu) + ((bits & 0x7FFFFFu) != 0u ? 1u : 0u);
  return code >= 0xFFu ? 0xFFu : code;
}

// One warp per block of 32 elements; lane i handles element i.
__global__ void QuantizeFp8Kernel(const float* __restrict__ x, uint8_t* __restrict__ codes,
                                  uint8_t* __restrict__ scales, int64_t num_blocks) {
  GridDependencyPrologue();
  const int64_t warp = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (warp >= num_blocks) return;
  const float v = x[warp * 32 + lane];
  const bool finite = isfinite(v);
  float amax = fabsf(v);
  for (int offset = 16; offset > 0; offset /= 2) {
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, offset));
  }
  const bool all_finite = __all_sync(0xffffffffu, finite);
  if (!all_finite) {
    codes[warp * 32 + lane] = 0x7F;
    if (lane == 0) scales[warp] = 0xFF;
    return;
  }
  // fl(1/448) as the CPU reference computes it: double 1/448 rounded to fp32.
  const float inv448 = static_cast<float>(1.0 / 448.0);
  const uint32_t code = Ue8m0CeilCode(__fmul_rn(fmaxf(amax, 1e-4f), inv448));
  const float s = __uint_as_float(code << 23);  // 2^(code - 127); code >= 1 here
  const float q = fminf(fmaxf(__fdiv_rn(v, s), -448.0f), 448.0f);
  codes[warp * 32 + lane] = __nv_cvt_float_to_fp8(q, __NV_SATFINITE, __NV_E4M3);
  if (lane == 0) scales[warp] = static_cast<uint8_t>(code);
}

}  // namespace weir::kernels::cuda

#endif  // WEIR_KERNELS_CUDA_QUANT_FP8_CUH_
