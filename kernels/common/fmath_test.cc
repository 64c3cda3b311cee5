#include "kernels/common/fmath.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace weir::kernels::fmath {
namespace {

uint32_t Bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof(b));
  return b;
}

// Distance in ulps between two finite floats of the same sign.
int64_t UlpDistance(float a, float b) {
  return std::llabs(static_cast<int64_t>(Bits(a)) - static_cast<int64_t>(Bits(b)));
}

TEST(FmathTest, ExpWithinOneUlpOfTheExactValue) {
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-103.0f, 88.7f);
  int64_t worst = 0, off = 0;
  for (int i = 0; i < 200000; ++i) {
    const float x = i < 1000 ? (i - 500) * 1e-3f : dist(rng);
    const float want = static_cast<float>(std::exp(static_cast<double>(x)));
    const int64_t d = UlpDistance(ExpF(x), want);
    worst = std::max(worst, d);
    off += d != 0;
  }
  EXPECT_LE(worst, 1);
  EXPECT_LT(off, 200);  // nearly always correctly rounded
  EXPECT_EQ(ExpF(0.0f), 1.0f);
  EXPECT_EQ(ExpF(-INFINITY), 0.0f);
  EXPECT_EQ(ExpF(INFINITY), INFINITY);
  EXPECT_EQ(ExpF(100.0f), INFINITY);
  EXPECT_TRUE(std::isnan(ExpF(NAN)));
  // Subnormal results.
  EXPECT_EQ(ExpF(-100.0f), static_cast<float>(std::exp(-100.0)));
}

TEST(FmathTest, Log1pWithinOneUlpOfTheExactValue) {
  std::mt19937 rng(2);
  std::uniform_real_distribution<float> dist(-20.0f, 20.0f);
  int64_t worst = 0;
  for (int i = 0; i < 200000; ++i) {
    const float x = i % 2 == 0 ? std::exp(dist(rng)) : -std::exp(dist(rng) - 21.0f);
    const float want = static_cast<float>(std::log1p(static_cast<double>(x)));
    worst = std::max(worst, UlpDistance(Log1pF(x), want));
  }
  EXPECT_LE(worst, 1);
  EXPECT_EQ(Log1pF(0.0f), 0.0f);
  EXPECT_EQ(Log1pF(-1.0f), -INFINITY);
  EXPECT_EQ(Log1pF(INFINITY), INFINITY);
  EXPECT_TRUE(std::isnan(Log1pF(-2.0f)));
  EXPECT_TRUE(std::isnan(Log1pF(NAN)));
}

TEST(FmathTest, SigmoidMatchesItsDefinition) {
  for (float v : {-30.0f, -1.5f, 0.0f, 0.25f, 7.0f, 90.0f}) {
    EXPECT_EQ(SigmoidF(v), 1.0f / (1.0f + ExpF(-v))) << v;
    EXPECT_NEAR(SigmoidF(v), 1.0 / (1.0 + std::exp(-static_cast<double>(v))), 1e-7) << v;
  }
}

// The warp form of LaneSum, emulated: 32 lane accumulators, then an xor
// butterfly in which every lane adds its partner (the device's shuffles).
template <typename T>
T WarpEmulation(const std::vector<T>& terms) {
  T lane[kLanes] = {};
  for (size_t i = 0; i < terms.size(); ++i) lane[i % kLanes] = Add(lane[i % kLanes], terms[i]);
  for (int off = kLanes / 2; off > 0; off /= 2) {
    T next[kLanes];
    for (int l = 0; l < kLanes; ++l) next[l] = Add(lane[l], lane[l ^ off]);
    for (int l = 0; l < kLanes; ++l) lane[l] = next[l];
  }
  for (int l = 1; l < kLanes; ++l) EXPECT_EQ(lane[l], lane[0]) << "lane " << l;
  return lane[0];
}

TEST(FmathTest, LaneSumEqualsTheWarpButterflyBitwise) {
  std::mt19937 rng(3);
  std::normal_distribution<float> dist;
  for (int64_t n : {1, 5, 31, 32, 33, 100, 512, 4099}) {
    std::vector<float> a(n), b(n), prod(n);
    std::vector<double> sq(n);
    for (int64_t i = 0; i < n; ++i) {
      a[i] = dist(rng) * 1e3f;
      b[i] = dist(rng);
      prod[i] = a[i] * b[i];
      sq[i] = static_cast<double>(a[i]) * a[i];
    }
    const float dot = LaneDot(a.data(), b.data(), n);
    EXPECT_EQ(Bits(dot), Bits(WarpEmulation(prod))) << n;
    EXPECT_EQ(LaneSumSquares(a.data(), n), WarpEmulation(sq)) << n;
    double exact = 0;
    for (int64_t i = 0; i < n; ++i) exact += static_cast<double>(a[i]) * b[i];
    EXPECT_NEAR(dot, exact, 1e-3 * std::sqrt(static_cast<double>(n)) * 1e3) << n;
  }
  EXPECT_EQ(LaneDot(nullptr, nullptr, 0), 0.0f);
}

}  // namespace
}  // namespace weir::kernels::fmath
