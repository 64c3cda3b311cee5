// kernels/cuda/decode/bf16.cuh — bf16 rounding on the device, bit-identical
// to kernels/common/numeric_formats.h RoundToBf16 (the rounding of
// kernels/cpu RoundToBf16InPlace and so of worker/model CpuOps::RoundBf16):
// nearest even; NaN stays NaN with the quiet bit set, sign and top payload
// kept; finite values past the bf16 range round to +-Inf. No host dependencies.
#ifndef WEIR_KERNELS_CUDA_DECODE_BF16_CUH_
#define WEIR_KERNELS_CUDA_DECODE_BF16_CUH_

#include <cstdint>

namespace weir::kernels::cuda::decode {

__device__ __forceinline__ float RoundBf16Value(float x) {
  const uint32_t bits = __float_as_uint(x);
  if (isnan(x)) return __uint_as_float(((bits >> 16) | 0x0040u) << 16);
  // Adding 0x7FFF plus the lowest kept bit rounds to nearest, ties to even.
  const uint32_t rounding = 0x7FFFu + ((bits >> 16) & 1u);
  return __uint_as_float(((bits + rounding) >> 16) << 16);
}

}  // namespace weir::kernels::cuda::decode

#endif  // WEIR_KERNELS_CUDA_DECODE_BF16_CUH_
