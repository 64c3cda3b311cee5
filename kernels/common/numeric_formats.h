// kernels/common/numeric_formats.h
//
// Scalar conversions between fp32 and the narrow formats DeepSeek-V4.1 stores
// (spec §4.9, §9): bf16, FP8 e4m3fn, FP4 e2m1, E8M0 (UE8M0) and E4M3 block
// scales. Every rounding is spelled out, because these functions are the
// specification the CUDA kernels are tested against bit for bit.
//
// Thread safety: pure functions, no state.

#ifndef WEIR_KERNELS_COMMON_NUMERIC_FORMATS_H_
#define WEIR_KERNELS_COMMON_NUMERIC_FORMATS_H_

#include <array>
#include <bit>
#include <cstdint>
#include <limits>

namespace weir::kernels {
namespace internal {

// Decode tables, built at compile time with exact power-of-two arithmetic so
// that the hot dequantization loops are a load instead of an ldexp.
constexpr float ExactPow2(int e) {
  float r = 1.0f;
  for (; e > 0; --e) r *= 2.0f;
  for (; e < 0; ++e) r *= 0.5f;
  return r;
}

constexpr std::array<float, 256> MakeE4m3Table() {
  std::array<float, 256> t{};
  for (int code = 0; code < 256; ++code) {
    const int exponent = (code >> 3) & 0xF, mantissa = code & 0x7;
    float v = exponent == 0 ? static_cast<float>(mantissa) * ExactPow2(-9)
                            : static_cast<float>(8 + mantissa) * ExactPow2(exponent - 10);
    if (exponent == 0xF && mantissa == 0x7) v = std::numeric_limits<float>::quiet_NaN();
    t[code] = (code & 0x80) ? -v : v;
  }
  return t;
}

constexpr std::array<float, 256> MakeE8m0Table() {
  std::array<float, 256> t{};
  for (int code = 0; code < 255; ++code) t[code] = ExactPow2(code - 127);
  t[255] = std::numeric_limits<float>::quiet_NaN();
  return t;
}

inline constexpr std::array<float, 256> kE4m3Values = MakeE4m3Table();
inline constexpr std::array<float, 256> kE8m0Values = MakeE8m0Table();
inline constexpr std::array<float, 16> kE2m1Values = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,
                                                      4.0f,  6.0f,  -0.0f, -0.5f, -1.0f, -1.5f,
                                                      -2.0f, -3.0f, -4.0f, -6.0f};

}  // namespace internal

// ---- bf16 (1-8-7) ----------------------------------------------------------

// Returns the bf16 bit pattern nearest to `x`, ties to even. NaN stays NaN
// (quiet bit forced, sign kept); values past the largest bf16 round to +-Inf.
inline uint16_t FloatToBf16Bits(float x) {
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((bits >> 16) | 0x0040u);
  // Adding 0x7FFF plus the lowest kept bit rounds to nearest, ties to even;
  // the carry ripples into the exponent (and to Inf) exactly as it should.
  const uint32_t rounding = 0x7FFFu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

// Returns the fp32 value of a bf16 bit pattern (exact).
inline float Bf16BitsToFloat(uint16_t bits) {
  return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16);
}

// Returns `x` rounded to the nearest bf16 value, as an fp32.
inline float RoundToBf16(float x) { return Bf16BitsToFloat(FloatToBf16Bits(x)); }

// ---- FP8 e4m3fn (1-4-3, bias 7, no Inf, NaN = S.1111.111) -----------------

inline constexpr float kE4m3Max = 448.0f;

// Returns the e4m3fn code nearest to `x`, ties to even, subnormals kept
// (smallest 2^-9). Saturating (like CUDA's __NV_SATFINITE): |x| > 448 and
// +-Inf give +-448; NaN gives 0x7F with the sign of `x`.
// (Computed on the fp32 bits; numeric_formats_test holds it equal to the
// rule spelled out with frexp / ldexp / nearbyint on every fp32 whose code
// is not a constant.)
inline uint8_t FloatToE4m3(float x) {
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  const uint8_t sign = static_cast<uint8_t>((bits >> 24) & 0x80u);
  const uint32_t a = bits & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return sign | 0x7F;   // NaN
  if (a >= 0x43E00000u) return sign | 0x7E;  // >= 448 (Inf too): satfinite
  if (a < 0x3C800000u) {
    // Below the smallest normal 2^-6: multiples of the subnormal step 2^-9.
    // |x| * 2^9 < 8 is exact; adding 2^23 rounds it to an integer, ties to
    // even (the default rounding mode), and leaves that integer in the low
    // mantissa bits. q == 8 is the smallest normal, whose code is also 8.
    const float shifted = std::bit_cast<float>(a) * 512.0f + 8388608.0f;
    return sign | static_cast<uint8_t>(std::bit_cast<uint32_t>(shifted) - 0x4B000000u);
  }
  // Normal: keep 3 of the 23 mantissa bits, ties to even; a carry moves into
  // the exponent as it should. The fp32 exponent bias is 127, e4m3's 7:
  // (127 - 7) << 3 = 960. |x| < 448 keeps the code at 0x7E at most.
  const uint32_t rounded = (a + 0x7FFFFu + ((a >> 20) & 1u)) >> 20;
  return sign | static_cast<uint8_t>(rounded - 960u);
}

// Returns the fp32 value of an e4m3fn code (exact); 0x7F / 0xFF give NaN.
inline float E4m3ToFloat(uint8_t code) { return internal::kE4m3Values[code]; }

// ---- FP4 e2m1 (1-2-1, bias 1, values 0 .5 1 1.5 2 3 4 6) -----------------

inline constexpr float kE2m1Max = 6.0f;

// Returns the 4-bit e2m1 code (low nibble; bit 3 = sign) nearest to `x`, ties
// to the even code (0.25->0, 0.75->1, 1.25->1, 1.75->2, 2.5->2, 3.5->4, 5->4).
// Saturating: |x| > 6 and +-Inf give +-6. e2m1 has no NaN: NaN gives +0
// (callers flag non-finite blocks through the block scale instead).
// (On the fp32 bits, as FloatToE4m3; numeric_formats_test checks it the same
// way.)
inline uint8_t FloatToE2m1(float x) {
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  const uint32_t a = bits & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return 0;  // NaN
  const uint8_t sign = static_cast<uint8_t>((bits >> 28) & 0x8u);
  if (a >= 0x40C00000u) return sign | 0x7;  // >= 6 (Inf too)
  if (a < 0x3F800000u) {
    // Below 1: multiples of 0.5 (q == 2 is 1.0, whose code is also 2).
    const float shifted = std::bit_cast<float>(a) * 2.0f + 8388608.0f;
    return sign | static_cast<uint8_t>(std::bit_cast<uint32_t>(shifted) - 0x4B000000u);
  }
  // Keep 1 mantissa bit, ties to even; bias 127 -> 1: (127 - 1) << 1 = 252.
  const uint32_t rounded = (a + 0x1FFFFFu + ((a >> 22) & 1u)) >> 22;
  return sign | static_cast<uint8_t>(rounded - 252u);
}

// Returns the fp32 value of the e2m1 code in the low nibble of `code`.
inline float E2m1ToFloat(uint8_t code) { return internal::kE2m1Values[code & 0xF]; }

// ---- E8M0 / UE8M0 scales (8-bit biased exponent, value 2^(e-127)) --------

inline constexpr uint8_t kE8m0Nan = 0xFF;

// Returns the fp32 value 2^(code-127) (code 0 is the fp32 subnormal 2^-127);
// 0xFF gives NaN.
inline float E8m0ToFloat(uint8_t code) { return internal::kE8m0Values[code]; }

// Returns the E8M0 code of 2^ceil(log2(v)) for v >= 0, computed from the fp32
// bits exactly as DeepSeek's kernels do: biased exponent field plus one if any
// mantissa bit is set (so an fp32 subnormal v maps to 2^-126, v = 0 to
// 2^-127). +Inf, NaN and values whose ceiling passes 2^127 give 0xFF (NaN).
uint8_t Ue8m0CeilCode(float v);

}  // namespace weir::kernels

#endif  // WEIR_KERNELS_COMMON_NUMERIC_FORMATS_H_
