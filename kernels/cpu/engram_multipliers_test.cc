// kernels/cpu/engram_multipliers_test.cc
//
// Expected values were produced by numpy 2.5.2:
//   numpy.random.default_rng(seed).integers(0, high, size=n, dtype=numpy.int64)

#include "kernels/cpu/engram_multipliers.h"

#include <vector>

#include "gtest/gtest.h"

namespace weir::kernels::cpu {
namespace {

std::vector<int64_t> Draw(int64_t seed, int64_t high, int64_t n) {
  absl::StatusOr<std::vector<int64_t>> v = NumpyDefaultRngIntegers(seed, high, n);
  EXPECT_TRUE(v.ok()) << v.status();
  return v.ok() ? *v : std::vector<int64_t>{};
}

TEST(NumpyDefaultRng, SixtyFourBitLemireMatchesNumpy) {
  EXPECT_EQ(Draw(10007, 46538025950963, 4),
            (std::vector<int64_t>{38314885245523, 2419864608765, 17979290525356, 36992546081858}));
  EXPECT_EQ(Draw(140098, 46538025950963, 4),
            (std::vector<int64_t>{33857377868170, 25754621800901, 15460204416101, 41308359619435}));
  // A seed wider than 32 bits exercises SeedSequence's multi-word entropy.
  EXPECT_EQ(Draw(123456789012345, 4611686018427387903, 3),
            (std::vector<int64_t>{2444225723466269624, 204952984126822115, 3492711094134761622}));
}

TEST(NumpyDefaultRng, BufferedThirtyTwoBitLemireMatchesNumpy) {
  EXPECT_EQ(Draw(0, 1000, 6), (std::vector<int64_t>{850, 636, 511, 269, 307, 40}));
  EXPECT_EQ(Draw(10007, 100, 5), (std::vector<int64_t>{14, 82, 61, 5, 54}));
  EXPECT_EQ(Draw(5, 3000000000, 4),
            (std::vector<int64_t>{2415008770, 67959658, 1545976682, 1890702091}));
  EXPECT_EQ(Draw(3, 1, 2), (std::vector<int64_t>{0, 0}));
  EXPECT_FALSE(NumpyDefaultRngIntegers(-1, 10, 1).ok());
  EXPECT_FALSE(NumpyDefaultRngIntegers(1, 0, 1).ok());
}

TEST(EngramMultipliers, V41LayersOneAndFourteen) {
  // V4.1: engram layers [1, 14], max n-gram 4, compressed vocab 99092.
  const std::vector<int> layers = {1, 14};
  absl::StatusOr<std::vector<int64_t>> m = EngramMultipliers(layers, 4, 99092);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(*m, (std::vector<int64_t>{76632096046245, 4839876093313, 35959672319349,
                                      73987337458391, 67716810739261, 51510806800915,
                                      30921347202721, 82619226485591}));
  for (int64_t v : *m) EXPECT_EQ(v % 2, 1);
  EXPECT_FALSE(EngramMultipliers(layers, 0, 99092).ok());
}

}  // namespace
}  // namespace weir::kernels::cpu
