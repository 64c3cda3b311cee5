// kernels/cuda/rounding.cuh
//
// The device forms of kernels/common/numeric_formats.h, shared by every CUDA
// kernel package (attention, decode, dense, moe): bf16 rounding and the FP8
// e4m3fn / UE8M0 conversions and the MXFP4 element value. Each gives the bits of its CPU namesake,
// so a kernel that rounds where its CPU reference rounds stays bit-identical. Device code only; no
// host dependencies.
//
// Thread safety: pure functions.

#ifndef WEIR_KERNELS_CUDA_ROUNDING_CUH_
#define WEIR_KERNELS_CUDA_ROUNDING_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

namespace weir::kernels::cuda {

// Returns `x` rounded to the nearest bf16 value (ties to even), as an fp32:
// numeric_formats.h RoundToBf16. NaN stays NaN with the quiet bit set, sign
// and top payload kept; finite values past the bf16 range round to +-Inf.
__device__ __forceinline__ float RoundToBf16(float x) {
  const uint32_t bits = __float_as_uint(x);
  if (isnan(x)) return __uint_as_float(((bits >> 16) | 0x0040u) << 16);
  // Adding 0x7FFF plus the lowest kept bit rounds to nearest, ties to even.
  const uint32_t rounding = 0x7FFFu + ((bits >> 16) & 1u);
  return __uint_as_float(((bits + rounding) >> 16) << 16);
}

// RoundToBf16 of a and b with one conversion for both (cvt.rn.bf16x2.f32:
// ties to even, subnormals kept, overflow to +-inf). Equal to RoundToBf16 on
// every value but NaN, which the conversion makes the canonical 0x7fff0000
// whatever its sign and payload (RoundToBf16 keeps them): callers give it only
// values whose NaNs are canonical already (a tensor core's or an fp32
// multiply's). round_pair_probe_test compares the two on the device.
__device__ __forceinline__ void RoundPairToBf16(float& a, float& b) {
  const __nv_bfloat162 pair = __floats2bfloat162_rn(a, b);
  uint32_t bits;
  __builtin_memcpy(&bits, &pair, sizeof(bits));
  a = __uint_as_float(bits << 16);
  b = __uint_as_float(bits & 0xffff0000u);
}

// The bf16 bits of RoundToBf16(x) (its upper half): what a bf16 product
// reads of an fp32 value (ToBf16, and the launches that write that form).
__device__ __forceinline__ uint16_t Bf16BitsOf(float x) {
  return static_cast<uint16_t>(__float_as_uint(RoundToBf16(x)) >> 16);
}

// Returns the UE8M0 code of 2^ceil(log2(v)) for finite v >= 0: the biased
// exponent field, plus one if any mantissa bit is set; 0xFF (NaN) when that
// passes 254.
__device__ __forceinline__ uint32_t Ue8m0CeilCode(float v) {
  const uint32_t bits = __float_as_uint(v);
  const uint32_t code = ((bits >> 23) & 0xFFu) + ((bits & 0x7FFFFFu) != 0u ? 1u : 0u);
  return code >= 0xFFu ? 0xFFu : code;
}

// Returns 2^(code - 127): numeric_formats.h E8m0ToFloat. Code 0 is the fp32
// subnormal 2^-127, 0xFF is NaN.
__device__ __forceinline__ float E8m0ToFloat(uint32_t code) {
  if (code == 0xFFu) return __uint_as_float(0x7FC00000u);
  if (code == 0u) return __uint_as_float(0x00400000u);
  return __uint_as_float(code << 23);
}

// Returns the fp32 value of an e4m3fn code, exact (every e4m3 value is a half
// value); 0x7F / 0xFF are NaN: numeric_formats.h E4m3ToFloat.
__device__ __forceinline__ float E4m3ToFloat(uint8_t code) {
  return __half2float(__half(__nv_cvt_fp8_to_halfraw(code, __NV_E4M3)));
}

// Returns the e4m3fn code nearest to `v`, ties to even, saturating to +-448:
// numeric_formats.h FloatToE4m3.
__device__ __forceinline__ uint8_t FloatToE4m3(float v) {
  return __nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3);
}

// Returns the fp32 value of MXFP4 element `code` (e2m1 in the low nibble, bit
// 3 the sign) under E8M0 scale `e`: exactly the E2m1ToFloat(code) *
// E8m0ToFloat(e) of cpu::DequantizeMxfp4Weight and cpu::DequantizeFp4 (kE8m0)
// (kernels/common/numeric_formats.h). Both
// factors are built from their bits: e2m1 magnitudes 0, .5, 1, 1.5, 2, 3, 4, 6;
// 2^(e-127) with e = 0 the fp32 subnormal 2^-127 and e = 0xFF NaN. The one
// rounded product (__fmul_rn, no flush to zero in this build) is exact except
// where it overflows to +-Inf (e = 0xFE with |e2m1| >= 2, e = 0xFD with
// |e2m1| >= 4), as on the CPU; a subnormal result (e <= 1) is exact because
// every e2m1 value is a multiple of 0.5.
__device__ __forceinline__ float Mxfp4Value(uint32_t code, uint32_t e) {
  const uint32_t mag = code & 7u;
  // mag = 2 * exponent field + mantissa bit; 1 is the subnormal 0.5.
  uint32_t bits =
      mag == 0 ? 0u : (mag == 1 ? 126u << 23 : (((mag >> 1) + 126u) << 23) | ((mag & 1u) << 22));
  bits |= (code & 8u) << 28;
  const uint32_t scale_bits = e == 0 ? 0x00400000u : (e == 0xFFu ? 0x7fc00000u : e << 23);
  return __fmul_rn(__uint_as_float(bits), __uint_as_float(scale_bits));
}

}  // namespace weir::kernels::cuda

#endif  // WEIR_KERNELS_CUDA_ROUNDING_CUH_
