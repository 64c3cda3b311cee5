// kernels/cuda/attention/bf16.cuh — bf16 rounding on the device, bit-identical
// to kernels/common/numeric_formats.h RoundToBf16 (nearest even; NaN stays NaN
// with the quiet bit set and its sign kept; overflow rounds to +-Inf).
#ifndef WEIR_KERNELS_CUDA_ATTENTION_BF16_CUH_
#define WEIR_KERNELS_CUDA_ATTENTION_BF16_CUH_

#include <cstdint>

namespace weir::kernels::cuda {

__device__ __forceinline__ float RoundToBf16(float x) {
  const uint32_t bits = __float_as_uint(x);
  if (isnan(x)) return __uint_as_float(((bits >> 16) | 0x0040u) << 16);
  const uint32_t rounding = 0x7FFFu + ((bits >> 16) & 1u);
  return __uint_as_float(((bits + rounding) >> 16) << 16);
}

}  // namespace weir::kernels::cuda

#endif  // WEIR_KERNELS_CUDA_ATTENTION_BF16_CUH_
