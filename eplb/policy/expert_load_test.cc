// eplb/policy/expert_load_test.cc

#include "eplb/policy/expert_load.h"

#include <cmath>
#include <limits>
#include <vector>

#include "gtest/gtest.h"

namespace weir::eplb::policy {
namespace {

TEST(ExpertLoadTest, IndexesWindowLayerExpertRowMajor) {
  std::vector<int64_t> counts(2 * 3 * 4);
  for (size_t i = 0; i < counts.size(); ++i) counts[i] = static_cast<int64_t>(i);
  absl::StatusOr<ExpertLoad> load = ExpertLoad::FromCounts(2, 3, 4, counts);
  ASSERT_TRUE(load.ok()) << load.status();
  EXPECT_EQ(load->num_windows(), 2);
  EXPECT_EQ(load->num_layers(), 3);
  EXPECT_EQ(load->num_logical_experts(), 4);
  EXPECT_EQ(load->at(1, 2, 3), 23.0);
  EXPECT_EQ(load->at(1, 0, 1), 13.0);
  // [E, W]: expert 3 of layer 2 is (window 0) 11, (window 1) 23.
  const std::vector<double> by_expert = load->LayerByExpert(2);
  ASSERT_EQ(by_expert.size(), 8u);
  EXPECT_EQ(by_expert[3 * 2 + 0], 11.0);
  EXPECT_EQ(by_expert[3 * 2 + 1], 23.0);
}

TEST(ExpertLoadTest, AcceptsFloatsAndDoubles) {
  const std::vector<float> f = {0.5f, 1.5f};
  const std::vector<double> d = {0.25, 0.0};
  ASSERT_TRUE(ExpertLoad::FromFloats(1, 1, 2, f).ok());
  absl::StatusOr<ExpertLoad> load = ExpertLoad::FromDoubles(2, 1, 1, d);
  ASSERT_TRUE(load.ok());
  EXPECT_EQ(load->at(0, 0, 0), 0.25);
}

TEST(ExpertLoadTest, RejectsWrongElementCount) {
  const std::vector<int64_t> counts(5, 1);
  EXPECT_EQ(ExpertLoad::FromCounts(2, 1, 2, counts).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ExpertLoadTest, RejectsNonPositiveAndHugeDimensions) {
  const std::vector<int64_t> none;
  EXPECT_EQ(ExpertLoad::FromCounts(0, 1, 1, none).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ExpertLoad::FromCounts(1, -1, -1, none).status().code(),
            absl::StatusCode::kInvalidArgument);
  // Overflowing products must not wrap around to a matching size.
  EXPECT_EQ(ExpertLoad::FromCounts(int64_t{1} << 40, int64_t{1} << 40, 1, none).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ExpertLoad::FromCounts(kMaxDim, kMaxDim, kMaxDim, none).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ExpertLoadTest, RejectsNegativeAndNonFiniteValues) {
  EXPECT_EQ(ExpertLoad::FromCounts(1, 1, 2, std::vector<int64_t>{3, -1}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ExpertLoad::FromCounts(1, 1, 1, std::vector<int64_t>{int64_t{1} << 62}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ExpertLoad::FromFloats(1, 1, 1, std::vector<float>{std::nanf("")}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      ExpertLoad::FromDoubles(1, 1, 1, std::vector<double>{std::numeric_limits<double>::infinity()})
          .status()
          .code(),
      absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace weir::eplb::policy
