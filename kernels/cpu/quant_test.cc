// kernels/cpu/quant_test.cc

#include "kernels/cpu/quant.h"

#include <bit>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/common/numeric_formats.h"

namespace weir::kernels::cpu {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

std::vector<float> Block(int n, std::initializer_list<float> head) {
  std::vector<float> x(n, 0.0f);
  std::copy(head.begin(), head.end(), x.begin());
  return x;
}

TEST(Fp8, ScaleIsCeilPowerOfTwoOfAmaxOver448) {
  // amax 1: 1/448 = 2^-8.8 -> s = 2^-8 (code 119); 1/s = 256 = e4m3 0x78.
  std::vector<float> x = Block(32, {1.0f, -0.5f});
  std::vector<uint8_t> codes(32), scales(1);
  ASSERT_TRUE(QuantizeFp8(x, 32, codes, scales).ok());
  EXPECT_EQ(scales[0], 119);
  EXPECT_EQ(codes[0], 0x78);
  EXPECT_EQ(codes[1], 0xF0);  // -128
  std::vector<float> out(32);
  ASSERT_TRUE(DequantizeFp8(codes, scales, 32, out).ok());
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], -0.5f);
  EXPECT_EQ(out[2], 0.0f);
}

TEST(Fp8, AmaxExactly448GivesUnitScaleAndAboveDoubles) {
  std::vector<float> x = Block(32, {448.0f, 1.0f});
  ASSERT_TRUE(FakeQuantFp8(x, 32).ok());
  EXPECT_EQ(x[0], 448.0f);
  EXPECT_EQ(x[1], 1.0f);
  // 449 * fl(1/448) > 1, so s = 2: 449/2 = 224.5 rounds to 224 (step 16).
  std::vector<float> y = Block(32, {449.0f, 1.0f});
  std::vector<uint8_t> codes(32), scales(1);
  ASSERT_TRUE(QuantizeFp8(y, 32, codes, scales).ok());
  EXPECT_EQ(scales[0], 128);
  ASSERT_TRUE(FakeQuantFp8(y, 32).ok());
  EXPECT_EQ(y[0], 448.0f);
  EXPECT_EQ(y[1], 1.0f);
}

TEST(Fp8, AmaxFloorOnTinyAndZeroBlocks) {
  // amax floor 1e-4: s = 2^ceil(log2(1e-4/448)) = 2^-22; 1e-6 / 2^-22 = 4.19 -> 4.
  std::vector<float> x = Block(32, {1e-6f});
  std::vector<uint8_t> codes(32), scales(1);
  ASSERT_TRUE(QuantizeFp8(x, 32, codes, scales).ok());
  EXPECT_EQ(scales[0], 127 - 22);
  ASSERT_TRUE(FakeQuantFp8(x, 32).ok());
  EXPECT_EQ(x[0], 4.0f * std::ldexp(1.0f, -22));
  std::vector<float> zero(64, 0.0f);
  ASSERT_TRUE(FakeQuantFp8(zero, 32).ok());
  for (float v : zero) EXPECT_EQ(v, 0.0f);
}

TEST(Fp8, NonFiniteBlockBecomesNanOthersUntouched) {
  std::vector<float> x(64, 1.0f);
  x[3] = kInf;
  std::vector<uint8_t> codes(64), scales(2);
  ASSERT_TRUE(QuantizeFp8(x, 32, codes, scales).ok());
  EXPECT_EQ(scales[0], kE8m0Nan);
  ASSERT_TRUE(FakeQuantFp8(x, 32).ok());
  for (int i = 0; i < 32; ++i) EXPECT_TRUE(std::isnan(x[i])) << i;
  for (int i = 32; i < 64; ++i) EXPECT_EQ(x[i], 1.0f) << i;
  std::vector<float> y(32, 2.0f);
  y[31] = std::numeric_limits<float>::quiet_NaN();
  ASSERT_TRUE(FakeQuantFp8(y, 32).ok());
  EXPECT_TRUE(std::isnan(y[0]));
}

TEST(Fp8, IdempotentAndBoundedError) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(32 * 64);
  for (size_t i = 0; i < x.size(); ++i) x[i] = normal(rng) * std::exp2(float(i / 32) - 30.0f);
  std::vector<float> once = x;
  ASSERT_TRUE(FakeQuantFp8(once, 32).ok());
  std::vector<float> twice = once;
  ASSERT_TRUE(FakeQuantFp8(twice, 32).ok());
  std::vector<uint8_t> codes(x.size()), scales(x.size() / 32);
  ASSERT_TRUE(QuantizeFp8(x, 32, codes, scales).ok());
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_EQ(once[i], twice[i]) << i;
    const float s = E8m0ToFloat(scales[i / 32]);
    // e4m3: relative half-ulp 2^-4 for normals, absolute 2^-10 * s for subnormals.
    ASSERT_LE(std::fabs(once[i] - x[i]), std::fabs(x[i]) / 16 + s * std::ldexp(1.0f, -10)) << i;
  }
}

TEST(Fp4E8m0, KnownCodesAndNibbleOrder) {
  // amax 6: 6 * fl(1/6) rounds to exactly 1, so s = 1.
  std::vector<float> x = Block(32, {6.0f, 3.0f, -1.25f, 0.25f, 0.75f});
  std::vector<uint8_t> packed(16), scales(1);
  ASSERT_TRUE(QuantizeFp4(x, 32, Fp4Scale::kE8m0, packed, scales).ok());
  EXPECT_EQ(scales[0], 127);
  EXPECT_EQ(packed[0], 0x57);  // element 0 (6 -> 7) low, element 1 (3 -> 5) high
  EXPECT_EQ(packed[1], 0x0A);  // -1.25 -> -1 (0xA); 0.25 -> 0
  EXPECT_EQ(packed[2], 0x02);  // 0.75 -> 1 (tie to even code)
  std::vector<float> out(32);
  ASSERT_TRUE(DequantizeFp4(packed, scales, 32, Fp4Scale::kE8m0, out).ok());
  EXPECT_EQ(out[0], 6.0f);
  EXPECT_EQ(out[2], -1.0f);
  EXPECT_EQ(out[4], 1.0f);
}

TEST(Fp4E8m0, CeilScaleMayRoundAboveAmax) {
  // amax 7 -> s = 2: 7/2 = 3.5 is a tie that rounds to 4, so 7 becomes 8.
  std::vector<float> x = Block(32, {7.0f, 1.0f});
  ASSERT_TRUE(FakeQuantFp4(x, 32, Fp4Scale::kE8m0).ok());
  EXPECT_EQ(x[0], 8.0f);
  EXPECT_EQ(x[1], 1.0f);
  std::vector<float> zero(32, 0.0f);
  std::vector<uint8_t> packed(16), scales(1);
  ASSERT_TRUE(QuantizeFp4(zero, 32, Fp4Scale::kE8m0, packed, scales).ok());
  EXPECT_EQ(scales[0], 1);  // floor 6*2^-126 -> 2^-126
}

TEST(Fp4E8m0, Idempotent) {
  std::mt19937 rng(9);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> x(32 * 16);
  for (float& v : x) v = normal(rng);
  ASSERT_TRUE(FakeQuantFp4(x, 32, Fp4Scale::kE8m0).ok());
  std::vector<float> again = x;
  ASSERT_TRUE(FakeQuantFp4(again, 32, Fp4Scale::kE8m0).ok());
  EXPECT_EQ(x, again);
}

TEST(Fp4E4m3, ScaleIsE4m3OfAmaxOverSix) {
  // amax 3: s = e4m3(0.5) = 0.5 (code 0x30); 3 -> 6, 1 -> 2, 0.2 -> 0.4 -> 0.5.
  std::vector<float> x = Block(16, {3.0f, 1.0f, 0.2f});
  std::vector<uint8_t> packed(8), scales(1);
  ASSERT_TRUE(QuantizeFp4(x, 16, Fp4Scale::kE4m3, packed, scales).ok());
  EXPECT_EQ(scales[0], 0x30);
  ASSERT_TRUE(FakeQuantFp4(x, 16, Fp4Scale::kE4m3).ok());
  EXPECT_EQ(x[0], 3.0f);
  EXPECT_EQ(x[1], 1.0f);
  EXPECT_EQ(x[2], 0.25f);
  // amax 5: 5/6 = 0.833 -> e4m3 0.8125 (code 0x35); 5/0.8125 = 6.15 clamps to 6.
  std::vector<float> y = Block(16, {5.0f});
  ASSERT_TRUE(QuantizeFp4(y, 16, Fp4Scale::kE4m3, packed, scales).ok());
  EXPECT_EQ(scales[0], 0x35);
  ASSERT_TRUE(FakeQuantFp4(y, 16, Fp4Scale::kE4m3).ok());
  EXPECT_EQ(y[0], 4.875f);
}

TEST(Fp4E4m3, ZeroBlockKeepsNonzeroScaleAndNanBlock) {
  std::vector<float> x(32, 0.0f);
  x[20] = -kInf;
  std::vector<uint8_t> packed(16), scales(2);
  ASSERT_TRUE(QuantizeFp4(x, 16, Fp4Scale::kE4m3, packed, scales).ok());
  EXPECT_EQ(scales[0], 0x01);  // floor 6*2^-9 -> 2^-9, the smallest subnormal
  EXPECT_EQ(scales[1], 0x7F);
  std::vector<float> out(32);
  ASSERT_TRUE(DequantizeFp4(packed, scales, 16, Fp4Scale::kE4m3, out).ok());
  EXPECT_EQ(out[0], 0.0f);
  EXPECT_TRUE(std::isnan(out[16]));
}

// FakeQuant* work in place block by block; they must equal Dequantize of
// Quantize bit for bit (NaN and Inf blocks, zero blocks, tiny and huge
// values, every scale kind).
TEST(Quant, FakeQuantEqualsDequantizeOfQuantize) {
  std::mt19937 rng(17);
  std::uniform_real_distribution<float> exponent(-140.0f, 130.0f);
  std::vector<float> x(64 * 32);
  for (size_t i = 0; i < x.size(); ++i) {
    const float v = std::exp2(exponent(rng));
    x[i] = (rng() & 1) ? -v : v;
  }
  const float inf = std::numeric_limits<float>::infinity();
  x[40] = std::numeric_limits<float>::quiet_NaN();
  x[100] = -inf;
  std::fill(x.begin() + 128, x.begin() + 160, 0.0f);
  for (int i = 160; i < 192; ++i) x[i] = std::ldexp(1.0f, -140) * static_cast<float>(i - 170);
  const auto bits_equal = [](const std::vector<float>& a, const std::vector<float>& b) {
    for (size_t i = 0; i < a.size(); ++i) {
      if (std::bit_cast<uint32_t>(a[i]) != std::bit_cast<uint32_t>(b[i])) {
        ADD_FAILURE() << "element " << i << ": " << a[i] << " vs " << b[i];
        return false;
      }
    }
    return true;
  };
  {
    std::vector<uint8_t> codes(x.size()), scales(x.size() / 32);
    std::vector<float> want(x.size()), got = x;
    ASSERT_TRUE(QuantizeFp8(x, 32, codes, scales).ok());
    ASSERT_TRUE(DequantizeFp8(codes, scales, 32, want).ok());
    ASSERT_TRUE(FakeQuantFp8(got, 32).ok());
    EXPECT_TRUE(bits_equal(got, want));
  }
  for (auto [block, scale] : {std::pair{32, Fp4Scale::kE8m0}, std::pair{16, Fp4Scale::kE4m3}}) {
    std::vector<uint8_t> packed(x.size() / 2), scales(x.size() / block);
    std::vector<float> want(x.size()), got = x;
    ASSERT_TRUE(QuantizeFp4(x, block, scale, packed, scales).ok());
    ASSERT_TRUE(DequantizeFp4(packed, scales, block, scale, want).ok());
    ASSERT_TRUE(FakeQuantFp4(got, block, scale).ok());
    EXPECT_TRUE(bits_equal(got, want)) << "block " << block;
  }
}

TEST(Quant, StoredSizesMatchSpec) {
  // SWA KV: 512 FP8 + 16 scales = 528 B; compressed KV: 256 + 32 = 288 B;
  // index K: 64 + 4 = 68 B (spec §4.9).
  std::vector<float> kv(512, 0.5f), index_k(128, 0.5f);
  std::vector<uint8_t> c8(512), s8(16), c4(256), s4(32), ci(64), si(4);
  EXPECT_TRUE(QuantizeFp8(kv, kFp8Block, c8, s8).ok());
  EXPECT_TRUE(QuantizeFp4(kv, kKvFp4Block, Fp4Scale::kE4m3, c4, s4).ok());
  EXPECT_TRUE(QuantizeFp4(index_k, kMxfp4Block, Fp4Scale::kE8m0, ci, si).ok());
  EXPECT_EQ(c8.size() + s8.size(), 528u);
  EXPECT_EQ(c4.size() + s4.size(), 288u);
  EXPECT_EQ(ci.size() + si.size(), 68u);
}

TEST(Quant, RejectsBadSizes) {
  std::vector<float> x(48);
  std::vector<uint8_t> codes(48), scales(1), packed(24);
  EXPECT_EQ(QuantizeFp8(x, 32, codes, scales).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(FakeQuantFp8(x, 0).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(FakeQuantFp4(x, 3, Fp4Scale::kE8m0).code(), absl::StatusCode::kInvalidArgument);
  std::vector<uint8_t> s3(3);
  EXPECT_EQ(QuantizeFp4(x, 16, Fp4Scale::kE4m3, codes, s3).code(),
            absl::StatusCode::kInvalidArgument);  // packed must be n/2
  EXPECT_TRUE(QuantizeFp4(x, 16, Fp4Scale::kE4m3, packed, s3).ok());
}

}  // namespace
}  // namespace weir::kernels::cpu
