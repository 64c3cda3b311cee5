#include "kernels/common/row_stable.h"

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace weir::kernels {
namespace {

uint32_t Bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof(b));
  return b;
}

TEST(RowStableTest, LanesAreTheTermsModuloFour) {
  for (int64_t k = 0; k < 64; ++k) EXPECT_EQ(RowStableLane(k), k % 4) << k;
  static_assert(RowStableLane(7) == 3 && kRowStableLanes == 4);
}

// Terms chosen so that other plausible orders give other results: lane 0 =
// 2^24 + 1 rounds to 2^24 and lane 2 + lane 3 = 1 - 2^24 is exact, so
// (l0 + l1) + (l2 + l3) = 1, where the same terms summed left to right give 2.
TEST(RowStableTest, SumsLanesThenCombinesPairs) {
  const float big = 16777216.0f;  // 2^24
  const std::vector<float> x = {big, 1.0f, -big, 1.0f, 1.0f};
  const std::vector<float> ones(x.size(), 1.0f);
  EXPECT_EQ(RowStableDotReference(x.data(), ones.data(), 5), 1.0f);
  float sequential = 0.0f;
  for (float v : x) sequential += v;
  EXPECT_EQ(sequential, 2.0f);

  // Lanes 2^24, 1, 1, -2^24: (l0 + l1) + (l2 + l3) = 2^24 + (1 - 2^24) = 1;
  // serially ((l0 + l1) + l2) + l3 = 0, paired as (l0 + l3) + (l1 + l2) = 2.
  EXPECT_EQ(RowStableCombine(big, 1.0f, 1.0f, -big), 1.0f);
  EXPECT_EQ(((big + 1.0f) + 1.0f) + -big, 0.0f);
  EXPECT_EQ(RowStableCombine(big, -big, 1.0f, 1.0f), 2.0f);
}

// Each product is rounded before its addition: with an FMA, lane 0 would be
// -1 + (1 + 2^-11 + 2^-24) exactly; rounded first, the 2^-24 is lost (a tie,
// to even).
TEST(RowStableTest, RoundsEachProductBeforeItsAddition) {
  const float a = 1.0f + std::ldexp(1.0f, -12);
  const std::vector<float> x = {-1.0f, 0.0f, 0.0f, 0.0f, a};
  const std::vector<float> w = {1.0f, 0.0f, 0.0f, 0.0f, a};
  EXPECT_EQ(RowStableStep(-1.0f, a, a), std::ldexp(1.0f, -11));
  EXPECT_EQ(RowStableDotReference(x.data(), w.data(), 5), std::ldexp(1.0f, -11));
  EXPECT_NE(std::fma(a, a, -1.0f), std::ldexp(1.0f, -11));
}

// Zero padding on either side (a GPU tile's tail) leaves every bit alone,
// -0 results included.
TEST(RowStableTest, ZeroPaddingKeepsTheBits) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t n : {1, 3, 4, 7, 33, 130}) {
    std::vector<float> x(n + 5, 0.0f), w(n + 5, 0.0f);
    for (int64_t k = 0; k < n; ++k) {
      x[k] = normal(rng);
      w[k] = normal(rng);
    }
    const float want = RowStableDotReference(x.data(), w.data(), n);
    for (int64_t pad = 1; pad <= 5; ++pad) {
      EXPECT_EQ(Bits(RowStableDotReference(x.data(), w.data(), n + pad)), Bits(want))
          << n << " + " << pad;
    }
  }
  const float neg[] = {-0.0f}, pos[] = {1.0f};
  EXPECT_EQ(Bits(RowStableDotReference(neg, pos, 1)), Bits(0.0f));  // +0 + -0 = +0
}

}  // namespace
}  // namespace weir::kernels
