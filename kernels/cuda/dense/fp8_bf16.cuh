// kernels/cuda/dense/fp8_bf16.cuh — the UE8M0 scale decode and the e4m3 x
// scale -> bf16 conversion that the FP8 tensor-core kernels
// (fp8_mma_sm90.cuh) and the activation quantizer (act_quant_fp8.cuh: the
// dequantized bf16 form beside the codes) share, so every bf16 value made
// from a code and a scale has the same bits. No host dependencies.
#ifndef WEIR_KERNELS_CUDA_DENSE_FP8_BF16_CUH_
#define WEIR_KERNELS_CUDA_DENSE_FP8_BF16_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

namespace weir::kernels::cuda::dense {
namespace fp8_gemm {

// E8m0ToFloat of byte j of `word`, without branches: 2^(c - 127) from the
// bits, c = 0 the subnormal 2^-127, c = 0xFF NaN.
__device__ __forceinline__ float ScaleOf(uint32_t word, int j) {
  const uint32_t c = (word >> (8 * j)) & 0xFFu;
  uint32_t bits = c << 23;
  bits = c == 0u ? 0x00400000u : bits;
  bits = c == 0xFFu ? 0x7FC00000u : bits;
  return __uint_as_float(bits);
}

// The bf16 bits of eight e4m3 codes (lo: codes 0 - 3, hi: 4 - 7, byte order)
// under one UE8M0 scale byte: each value is code x 2^(scale - 127) in fp32
// (the e4m3 value is exact in f16 and fp32; one rounding in the multiply,
// none for any scale a quantizer picks), then rounded to bf16 (nearest
// even). out[i] packs values 2i (low half) and 2i + 1. Bf16Gemm's w_codes
// path, Fp8WeightBf16, Fp8ActBf16 (act_quant_fp8.h) and ActQuantEight's
// dequantized form (act_quant_fp8.cuh) share it, so all give the same bits.
__device__ __forceinline__ void Fp8ToBf16Eight(uint32_t lo, uint32_t hi, uint32_t scale_byte,
                                               uint32_t (&out)[4]) {
  const float s = ScaleOf(scale_byte, 0);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint32_t word = i < 2 ? lo : hi;
    const __nv_fp8x2_storage_t pair =
        static_cast<__nv_fp8x2_storage_t>((word >> (16 * (i & 1))) & 0xFFFFu);
    const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(pair, __NV_E4M3);
    const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&h));
    const __nv_bfloat162 b = __floats2bfloat162_rn(__fmul_rn(f.x, s), __fmul_rn(f.y, s));
    out[i] = *reinterpret_cast<const uint32_t*>(&b);
  }
}

}  // namespace fp8_gemm
}  // namespace weir::kernels::cuda::dense

#endif  // WEIR_KERNELS_CUDA_DENSE_FP8_BF16_CUH_
