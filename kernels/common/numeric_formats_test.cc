// kernels/common/numeric_formats_test.cc

#include "kernels/common/numeric_formats.h"

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace weir::kernels {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNan = std::numeric_limits<float>::quiet_NaN();

float Pow2(int e) { return std::ldexp(1.0f, e); }

// The conversions as the rule reads, with frexp / ldexp / nearbyint (the
// library's functions work on the fp32 bits and must give these codes).
int RoundHalfEven(float v) { return static_cast<int>(std::nearbyint(v)); }

uint16_t SpelledBf16Bits(float x) {
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  if (std::isnan(x)) return static_cast<uint16_t>((bits >> 16) | 0x0040u);
  const uint32_t rounding = 0x7FFFu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

uint8_t SpelledE4m3(float x) {
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  if (std::isnan(x)) return sign | 0x7F;
  const float a = std::fabs(x);
  if (a >= kE4m3Max) return sign | 0x7E;
  if (a < 0.015625f) return sign | static_cast<uint8_t>(RoundHalfEven(std::ldexp(a, 9)));
  int e2 = 0;
  std::frexp(a, &e2);  // a = m * 2^e2, m in [0.5, 1)
  int exponent = e2 - 1;
  int q = RoundHalfEven(std::ldexp(a, 3 - exponent));  // in [8, 16]
  if (q == 16) {
    q = 8;
    ++exponent;
  }
  return sign | static_cast<uint8_t>(((exponent + 7) << 3) | (q - 8));
}

uint8_t SpelledE2m1(float x) {
  if (std::isnan(x)) return 0;
  const uint8_t sign = std::signbit(x) ? 0x8 : 0x0;
  const float a = std::fabs(x);
  if (a >= kE2m1Max) return sign | 0x7;
  if (a < 1.0f) return sign | static_cast<uint8_t>(RoundHalfEven(a * 2.0f));
  int e2 = 0;
  std::frexp(a, &e2);
  int exponent = e2 - 1;
  int q = RoundHalfEven(std::ldexp(a, 1 - exponent));  // in [2, 4]
  if (q == 4) {
    q = 2;
    ++exponent;
  }
  return sign | static_cast<uint8_t>(((exponent + 1) << 1) | (q - 2));
}

// Calls check(bits) for the positive fp32s with biased exponent field in
// [lo, hi], every `stride`-th mantissa (1: all of them), and the negative
// ones of every 16th; stops at the first false.
template <typename Check>
void ForEveryFloatWithExponent(uint32_t lo, uint32_t hi, Check check, uint32_t stride = 1) {
  for (uint32_t e = lo; e <= hi; ++e) {
    for (uint32_t m = 0; m < (1u << 23); m += stride) {
      if (!check((e << 23) | m)) return;
      if (m % (16 * stride) == 0 && !check(0x80000000u | (e << 23) | m)) return;
    }
  }
}

TEST(Bf16, KnownValuesAndTies) {
  EXPECT_EQ(FloatToBf16Bits(1.0f), 0x3F80);
  EXPECT_EQ(FloatToBf16Bits(-2.0f), 0xC000);
  EXPECT_EQ(FloatToBf16Bits(-0.0f), 0x8000);
  // 1 + 2^-8 is halfway between 1 (even) and 1 + 2^-7 (odd): stays at 1.
  EXPECT_EQ(FloatToBf16Bits(1.0f + Pow2(-8)), 0x3F80);
  // 1 + 3*2^-8 is halfway between 0x3F81 (odd) and 0x3F82 (even).
  EXPECT_EQ(FloatToBf16Bits(1.0f + 3 * Pow2(-8)), 0x3F82);
  // Just above the tie rounds up.
  EXPECT_EQ(FloatToBf16Bits(1.0f + Pow2(-8) + Pow2(-20)), 0x3F81);
  // Subnormals keep their top bits.
  EXPECT_EQ(FloatToBf16Bits(Pow2(-130)), 0x0008);
  // The largest float rounds past the largest bf16 into Inf.
  EXPECT_EQ(FloatToBf16Bits(std::numeric_limits<float>::max()), 0x7F80);
  EXPECT_EQ(FloatToBf16Bits(-kInf), 0xFF80);
  EXPECT_TRUE(std::isnan(RoundToBf16(kNan)));
  EXPECT_EQ(RoundToBf16(3.140625f), 3.140625f);  // exactly representable
  EXPECT_EQ(Bf16BitsToFloat(0x4049), 3.140625f);
}

TEST(Bf16, RoundTripOfEveryFiniteBf16) {
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const float v = Bf16BitsToFloat(static_cast<uint16_t>(b));
    if (std::isnan(v)) continue;
    ASSERT_EQ(FloatToBf16Bits(v), b) << std::hex << b;
  }
}

TEST(Bf16, EqualsTheSpelledRule) {
  // Every mantissa of the binades where something can differ: zero and
  // subnormals, around 1, the largest finite binade (rounding to Inf), Inf
  // and NaN.
  for (uint32_t e : {0u, 1u, 126u, 127u, 254u, 255u}) {
    ForEveryFloatWithExponent(e, e, [](uint32_t bits) {
      const float x = std::bit_cast<float>(bits);
      EXPECT_EQ(FloatToBf16Bits(x), SpelledBf16Bits(x)) << std::hex << bits;
      return FloatToBf16Bits(x) == SpelledBf16Bits(x);
    });
  }
}

TEST(DecodeTables, MatchLdexpFormulas) {
  for (int c = 0; c < 256; ++c) {
    const int e = (c >> 3) & 0xF, m = c & 7;
    const float s = (c & 0x80) ? -1.0f : 1.0f;
    const float want = e == 0 ? s * std::ldexp(float(m), -9) : s * std::ldexp(float(8 + m), e - 10);
    if (e == 0xF && m == 7) {
      EXPECT_TRUE(std::isnan(E4m3ToFloat(uint8_t(c))));
    } else {
      EXPECT_EQ(E4m3ToFloat(uint8_t(c)), want) << c;
    }
    if (c < 255) {
      EXPECT_EQ(E8m0ToFloat(uint8_t(c)), std::ldexp(1.0f, c - 127)) << c;
    }
  }
  EXPECT_EQ(E4m3ToFloat(0x01), Pow2(-9));
  EXPECT_EQ(E8m0ToFloat(0), Pow2(-127));  // fp32 subnormal, exact
  EXPECT_EQ(E2m1ToFloat(0xF7), 6.0f);     // only the low nibble counts
}

TEST(E4m3, KnownCodes) {
  EXPECT_EQ(FloatToE4m3(1.0f), 0x38);
  EXPECT_EQ(FloatToE4m3(-1.0f), 0xB8);
  EXPECT_EQ(FloatToE4m3(448.0f), 0x7E);
  EXPECT_EQ(FloatToE4m3(Pow2(-9)), 0x01);    // smallest subnormal
  EXPECT_EQ(FloatToE4m3(Pow2(-6)), 0x08);    // smallest normal
  EXPECT_EQ(FloatToE4m3(Pow2(-10)), 0x00);   // tie between 0 and 2^-9: even (0)
  EXPECT_EQ(FloatToE4m3(3 * Pow2(-10)), 0x02);  // 1.5 * 2^-9: tie, even (2)
  EXPECT_EQ(FloatToE4m3(17.0f), 0x58);       // tie 16 / 18 -> 16 (even mantissa)
  EXPECT_EQ(FloatToE4m3(19.0f), 0x5A);       // tie 18 / 20 -> 20
  EXPECT_EQ(FloatToE4m3(15.9f), 0x58);       // rounds up into the next binade
}

TEST(E4m3, SaturatesAndKeepsNan) {
  EXPECT_EQ(FloatToE4m3(464.0f), 0x7E);
  EXPECT_EQ(FloatToE4m3(1e6f), 0x7E);
  EXPECT_EQ(FloatToE4m3(kInf), 0x7E);
  EXPECT_EQ(FloatToE4m3(-kInf), 0xFE);
  EXPECT_EQ(FloatToE4m3(kNan), 0x7F);
  EXPECT_TRUE(std::isnan(E4m3ToFloat(0x7F)));
  EXPECT_TRUE(std::isnan(E4m3ToFloat(0xFF)));
  EXPECT_EQ(E4m3ToFloat(0x80), 0.0f);
  EXPECT_TRUE(std::signbit(E4m3ToFloat(0x80)));
}

// Independent brute-force nearest-value search over the positive code table,
// ties to the even code.
uint8_t NearestCode(float a, const std::vector<float>& table) {
  uint8_t best = 0;
  for (uint8_t c = 1; c < table.size(); ++c) {
    const float d_best = std::fabs(a - table[best]);
    const float d = std::fabs(a - table[c]);
    if (d < d_best || (d == d_best && (c % 2 == 0))) best = c;
  }
  return best;
}

TEST(E4m3, MatchesBruteForceNearest) {
  std::vector<float> table;
  for (int c = 0; c < 0x7F; ++c) table.push_back(E4m3ToFloat(static_cast<uint8_t>(c)));
  // Every code, every midpoint between neighbours and nudges around them.
  std::vector<float> probes;
  for (size_t i = 0; i + 1 < table.size(); ++i) {
    const float mid = 0.5f * (table[i] + table[i + 1]);
    probes.insert(probes.end(), {table[i], mid, std::nextafter(mid, 0.0f),
                                 std::nextafter(mid, 1000.0f)});
  }
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> exponent(-12.0f, 9.0f);
  for (int i = 0; i < 20000; ++i) probes.push_back(std::exp2(exponent(rng)));
  for (float a : probes) {
    if (a >= 448.0f) continue;
    ASSERT_EQ(FloatToE4m3(a), NearestCode(a, table)) << a;
    ASSERT_EQ(FloatToE4m3(-a), 0x80 | NearestCode(a, table)) << -a;
  }
}

TEST(E4m3, EqualsTheSpelledRuleOnEveryFloatThatMatters) {
  // Every mantissa of exponent fields 116 .. 123 (|x| in [2^-11, 2^-3):
  // the ties to zero at 2^-10, every subnormal step 2^-9 and its ties, the
  // first normal binades) and 134 .. 136 (up to the saturation at 448 and
  // past it); every 61st of the binades between, whose rounding is the same
  // bits at another exponent. Below, both give a signed zero; above and
  // NaN, constants (the random probes cover them).
  const auto same = [](uint32_t bits) {
    const float x = std::bit_cast<float>(bits);
    EXPECT_EQ(FloatToE4m3(x), SpelledE4m3(x)) << std::hex << bits;
    return FloatToE4m3(x) == SpelledE4m3(x);
  };
  ForEveryFloatWithExponent(116, 123, same);
  ForEveryFloatWithExponent(124, 133, same, 61);
  ForEveryFloatWithExponent(134, 136, same);
  std::mt19937 rng(5);
  for (int i = 0; i < 2000000; ++i) {
    const uint32_t bits = static_cast<uint32_t>(rng());
    const float x = std::bit_cast<float>(bits);
    ASSERT_EQ(FloatToE4m3(x), SpelledE4m3(x)) << std::hex << bits;
  }
  for (float x : {0.0f, -0.0f, kInf, -kInf, kNan, -kNan, Pow2(-149), -Pow2(-149),
                  std::numeric_limits<float>::max(), std::numeric_limits<float>::min()}) {
    ASSERT_EQ(FloatToE4m3(x), SpelledE4m3(x)) << x;
  }
}

TEST(E4m3, RoundTripOfEveryCode) {
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7F) == 0x7F) continue;
    ASSERT_EQ(FloatToE4m3(E4m3ToFloat(static_cast<uint8_t>(c))), c) << c;
  }
}

TEST(E2m1, ValuesAndTiesToEven) {
  const float values[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
  for (int c = 0; c < 8; ++c) {
    EXPECT_EQ(E2m1ToFloat(static_cast<uint8_t>(c)), values[c]);
    EXPECT_EQ(E2m1ToFloat(static_cast<uint8_t>(c | 8)), -values[c]);
    EXPECT_EQ(FloatToE2m1(values[c]), c);
    EXPECT_EQ(FloatToE2m1(-values[c]), c | 8);
  }
  EXPECT_EQ(FloatToE2m1(0.25f), 0);   // 0 | 0.5 -> 0
  EXPECT_EQ(FloatToE2m1(0.75f), 2);   // 0.5 | 1 -> 1
  EXPECT_EQ(FloatToE2m1(1.25f), 2);   // 1 | 1.5 -> 1
  EXPECT_EQ(FloatToE2m1(1.75f), 4);   // 1.5 | 2 -> 2
  EXPECT_EQ(FloatToE2m1(2.5f), 4);    // 2 | 3 -> 2
  EXPECT_EQ(FloatToE2m1(3.5f), 6);    // 3 | 4 -> 4
  EXPECT_EQ(FloatToE2m1(5.0f), 6);    // 4 | 6 -> 4
  EXPECT_EQ(FloatToE2m1(5.01f), 7);
  EXPECT_EQ(FloatToE2m1(2.49f), 4);
  EXPECT_EQ(FloatToE2m1(2.51f), 5);
  EXPECT_EQ(FloatToE2m1(100.0f), 7);
  EXPECT_EQ(FloatToE2m1(-kInf), 15);
  EXPECT_EQ(FloatToE2m1(kNan), 0);
  EXPECT_EQ(FloatToE2m1(-0.1f), 8);   // negative zero keeps its sign
}

TEST(E2m1, MatchesBruteForceNearest) {
  std::vector<float> table;
  for (int c = 0; c < 8; ++c) table.push_back(E2m1ToFloat(static_cast<uint8_t>(c)));
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(0.0f, 6.0f);
  for (int i = 0; i < 20000; ++i) {
    const float a = u(rng);
    ASSERT_EQ(FloatToE2m1(a), NearestCode(a, table)) << a;
  }
}

TEST(E2m1, EqualsTheSpelledRuleOnEveryFloatThatMatters) {
  // Every mantissa of exponent fields 123 .. 129, |x| in [2^-4, 8): the
  // ties at 0.25 and every step up to the saturation at 6 and past it.
  ForEveryFloatWithExponent(123, 129, [](uint32_t bits) {
    const float x = std::bit_cast<float>(bits);
    EXPECT_EQ(FloatToE2m1(x), SpelledE2m1(x)) << std::hex << bits;
    return FloatToE2m1(x) == SpelledE2m1(x);
  });
  std::mt19937 rng(9);
  for (int i = 0; i < 2000000; ++i) {
    const uint32_t bits = static_cast<uint32_t>(rng());
    const float x = std::bit_cast<float>(bits);
    ASSERT_EQ(FloatToE2m1(x), SpelledE2m1(x)) << std::hex << bits;
  }
  for (float x : {0.0f, -0.0f, kInf, -kInf, kNan, -kNan, Pow2(-149), -Pow2(-149)}) {
    ASSERT_EQ(FloatToE2m1(x), SpelledE2m1(x)) << x;
  }
}

TEST(E8m0, DecodeAndCeilRule) {
  EXPECT_EQ(E8m0ToFloat(127), 1.0f);
  EXPECT_EQ(E8m0ToFloat(0), Pow2(-127));
  EXPECT_EQ(E8m0ToFloat(254), Pow2(127));
  EXPECT_TRUE(std::isnan(E8m0ToFloat(0xFF)));

  EXPECT_EQ(Ue8m0CeilCode(1.0f), 127);                      // exact power: no rounding
  EXPECT_EQ(Ue8m0CeilCode(std::nextafter(1.0f, 2.0f)), 128);  // any mantissa bit rounds up
  EXPECT_EQ(Ue8m0CeilCode(0.75f), 127);
  EXPECT_EQ(Ue8m0CeilCode(Pow2(-126)), 1);
  EXPECT_EQ(Ue8m0CeilCode(Pow2(-149)), 1);  // subnormal: field 0 + 1
  EXPECT_EQ(Ue8m0CeilCode(0.0f), 0);
  EXPECT_EQ(Ue8m0CeilCode(Pow2(127)), 254);
  EXPECT_EQ(Ue8m0CeilCode(1.5f * Pow2(127)), 0xFF);
  EXPECT_EQ(Ue8m0CeilCode(kInf), 0xFF);
  EXPECT_EQ(Ue8m0CeilCode(kNan), 0xFF);
  // The scale covers v: 2^ceil(log2 v) >= v and half of it is < v.
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> exponent(-100.0f, 100.0f);
  for (int i = 0; i < 10000; ++i) {
    const float v = std::exp2(exponent(rng));
    const float s = E8m0ToFloat(Ue8m0CeilCode(v));
    ASSERT_GE(s, v);
    ASSERT_LT(0.5f * s, v);
  }
}

}  // namespace
}  // namespace weir::kernels
