// kernels/cpu/grouped_output_test.cc

#include "kernels/cpu/grouped_output.h"

#include <vector>

#include "gtest/gtest.h"
#include "kernels/common/numeric_formats.h"

namespace weir::kernels::cpu {
namespace {

TEST(GroupedOutput, BlockDiagonalProjection) {
  // 2 groups, W = 2, R = 1: A_0 = (1, 2), A_1 = (3, -1). o = (1, 1 | 2, 5).
  std::vector<float> a = {1, 2, 3, -1};
  LinearWeight wo_a{.format = WeightFormat::kF32, .out_features = 2, .in_features = 2, .f32 = a};
  std::vector<float> o = {1, 1, 2, 5}, u(2);
  ASSERT_TRUE(GroupedOutput(wo_a, {.o = o, .u = u, .tokens = 1, .groups = 2}).ok());
  EXPECT_EQ(u, (std::vector<float>{3.0f, 1.0f}));
  // Group 1's input never reaches group 0's output.
  o[2] = 100.0f;
  ASSERT_TRUE(GroupedOutput(wo_a, {.o = o, .u = u, .tokens = 1, .groups = 2}).ok());
  EXPECT_EQ(u[0], 3.0f);
  EXPECT_EQ(u[1], 295.0f);
}

TEST(GroupedOutput, Bf16WeightsTwoTokensAndBadArgs) {
  std::vector<uint16_t> a = {FloatToBf16Bits(0.5f), FloatToBf16Bits(1.0f), FloatToBf16Bits(2.0f),
                             FloatToBf16Bits(-1.0f)};  // [4, 1]: 2 groups x R = 2, W = 1
  LinearWeight wo_a{.format = WeightFormat::kBf16, .out_features = 4, .in_features = 1, .bf16 = a};
  std::vector<float> o = {2, 3, -1, 4}, u(8);
  ASSERT_TRUE(GroupedOutput(wo_a, {.o = o, .u = u, .tokens = 2, .groups = 2}).ok());
  EXPECT_EQ(u, (std::vector<float>{1, 2, 6, -3, -0.5f, -1, 8, -4}));
  EXPECT_FALSE(GroupedOutput(wo_a, {.o = o, .u = u, .tokens = 2, .groups = 3}).ok());
  std::vector<float> short_u(4);
  EXPECT_FALSE(GroupedOutput(wo_a, {.o = o, .u = short_u, .tokens = 2, .groups = 2}).ok());
}

}  // namespace
}  // namespace weir::kernels::cpu
