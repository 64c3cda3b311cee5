// kernels/common/numeric_formats.cc

#include "kernels/common/numeric_formats.h"

#include <bit>
#include <cmath>
#include <limits>

namespace weir::kernels {
namespace {

// Round half to even of a non-negative value that fits an int. Uses
// std::nearbyint under the default FE_TONEAREST mode, which is RNE.
int RoundHalfEven(float v) { return static_cast<int>(std::nearbyint(v)); }

}  // namespace

uint16_t FloatToBf16Bits(float x) {
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  if (std::isnan(x)) return static_cast<uint16_t>((bits >> 16) | 0x0040u);
  // Adding 0x7FFF plus the lowest kept bit rounds to nearest, ties to even;
  // the carry ripples into the exponent (and to Inf) exactly as it should.
  const uint32_t rounding = 0x7FFFu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

float Bf16BitsToFloat(uint16_t bits) {
  return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16);
}

float RoundToBf16(float x) { return Bf16BitsToFloat(FloatToBf16Bits(x)); }

uint8_t FloatToE4m3(float x) {
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  if (std::isnan(x)) return sign | 0x7F;
  const float a = std::fabs(x);
  if (a >= kE4m3Max) return sign | 0x7E;  // satfinite; (448, 464] rounds to 448 anyway
  if (a < 0.015625f) {                    // below the smallest normal 2^-6
    // Subnormal step 2^-9; q == 8 is the smallest normal, whose code is also 8.
    return sign | static_cast<uint8_t>(RoundHalfEven(std::ldexp(a, 9)));
  }
  int e2 = 0;
  std::frexp(a, &e2);  // a = m * 2^e2, m in [0.5, 1)
  int exponent = e2 - 1;
  int q = RoundHalfEven(std::ldexp(a, 3 - exponent));  // in [8, 16]
  if (q == 16) {
    q = 8;
    ++exponent;
  }
  // a < 448 guarantees the result is at most 448 (code 0x7E), never 0x7F.
  return sign | static_cast<uint8_t>(((exponent + 7) << 3) | (q - 8));
}

uint8_t FloatToE2m1(float x) {
  if (std::isnan(x)) return 0;
  const uint8_t sign = std::signbit(x) ? 0x8 : 0x0;
  const float a = std::fabs(x);
  if (a >= kE2m1Max) return sign | 0x7;
  if (a < 1.0f) {  // subnormal step 0.5; q == 2 is 1.0, whose code is also 2
    return sign | static_cast<uint8_t>(RoundHalfEven(a * 2.0f));
  }
  int e2 = 0;
  std::frexp(a, &e2);
  int exponent = e2 - 1;                               // 0, 1 or 2
  int q = RoundHalfEven(std::ldexp(a, 1 - exponent));  // in [2, 4]
  if (q == 4) {
    q = 2;
    ++exponent;
  }
  // a < 6 keeps exponent + 1 <= 3 with q == 3 at most: code 0x7 = 6.
  return sign | static_cast<uint8_t>(((exponent + 1) << 1) | (q - 2));
}

uint8_t Ue8m0CeilCode(float v) {
  if (std::isnan(v) || v < 0.0f) return kE8m0Nan;
  const uint32_t bits = std::bit_cast<uint32_t>(v);
  const uint32_t exponent_field = (bits >> 23) & 0xFFu;
  const uint32_t code = exponent_field + ((bits & 0x7FFFFFu) != 0 ? 1u : 0u);
  return code >= 0xFFu ? kE8m0Nan : static_cast<uint8_t>(code);
}

}  // namespace weir::kernels
