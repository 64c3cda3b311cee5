// eplb/policy/balance_test.cc

#include "eplb/policy/balance.h"

#include <vector>

#include "eplb/policy/test_util.h"
#include "gtest/gtest.h"

namespace weir::eplb::policy {
namespace {

TEST(PredictBalanceRatioTest, AveragesMaxOverMeanPerWindowAndLayer) {
  // 1 layer, 4 experts, 2 ranks x 2 slots, no redundancy: ranks {0,1}, {2,3}.
  // Window 0: loads 3,1 | 2,2 -> ranks 4, 4 -> 1.0.
  // Window 1: loads 6,0 | 1,1 -> ranks 6, 2 -> 6 / 4 = 1.5.
  const std::vector<double> values = {3, 1, 2, 2, 6, 0, 1, 1};
  absl::StatusOr<ExpertLoad> load = ExpertLoad::FromDoubles(2, 1, 4, values);
  ASSERT_TRUE(load.ok());
  absl::StatusOr<Placement> p = TrivialPlacement(1, 4, 4, 2);
  ASSERT_TRUE(p.ok());
  EXPECT_DOUBLE_EQ(*PredictBalanceRatio(*p, *load), 1.25);
  // Replicas split load evenly: expert 0 has three slots, two on rank 0.
  // Window 0: per replica 1 -> ranks 1+1+1 = 3, 2+2+1 = 5 -> 5 / 4 = 1.25.
  // Window 1: per replica 2 -> ranks 2+0+2 = 4, 1+1+2 = 4 -> 1.0.
  absl::StatusOr<Placement> r = PlacementFromPhysicalMap(1, 4, 2, {0, 1, 0, 2, 3, 0});
  ASSERT_TRUE(r.ok());
  EXPECT_DOUBLE_EQ(*PredictBalanceRatio(*r, *load), 1.125);
}

TEST(RankLoadsTest, SumsReplicaSharesOverWindows) {
  const std::vector<double> values = {3, 1, 2, 2, 6, 0, 1, 1};  // [2 windows, 1 layer, 4]
  absl::StatusOr<ExpertLoad> load = ExpertLoad::FromDoubles(2, 1, 4, values);
  ASSERT_TRUE(load.ok());
  // Rank 0: two of expert 0's three replicas and expert 1; rank 1: experts 2, 3, 0.
  absl::StatusOr<std::vector<double>> ranks =
      RankLoads(*PlacementFromPhysicalMap(1, 4, 2, {0, 1, 0, 2, 3, 0}), *load);
  ASSERT_TRUE(ranks.ok());
  EXPECT_EQ(*ranks, (std::vector<double>{(1 + 1 + 1) + (2 + 0 + 2), (2 + 2 + 1) + (1 + 1 + 2)}));
  EXPECT_EQ(RankLoads(*TrivialPlacement(2, 4, 4, 2), *load).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(PredictBalanceRatioTest, ZeroLoadIsBalanced) {
  const ExpertLoad zero = MakeLoad(2, 2, 4, [](int, int, int) { return 0.0; });
  EXPECT_DOUBLE_EQ(*PredictBalanceRatio(*TrivialPlacement(2, 4, 4, 2), zero), 1.0);
}

TEST(PredictBalanceRatioTest, RejectsMismatchedOrBrokenPlacements) {
  const ExpertLoad load = MakeLoad(1, 2, 4, [](int, int, int e) { return e; });
  const auto kInvalid = absl::StatusCode::kInvalidArgument;
  EXPECT_EQ(PredictBalanceRatio(*TrivialPlacement(3, 4, 4, 2), load).status().code(), kInvalid);
  EXPECT_EQ(PredictBalanceRatio(*TrivialPlacement(2, 5, 6, 2), load).status().code(), kInvalid);
  Placement broken = *TrivialPlacement(2, 4, 4, 2);
  broken.physical_to_logical[0] = 7;
  EXPECT_EQ(PredictBalanceRatio(broken, load).status().code(), kInvalid);
  EXPECT_EQ(PredictGain(broken, *TrivialPlacement(2, 4, 4, 2), load).status().code(), kInvalid);
}

TEST(PredictGainTest, ComparesTwoPlacements) {
  const std::vector<double> values = {6, 2, 1, 1};  // Ranks {0,1},{2,3} -> 8 vs 2.
  absl::StatusOr<ExpertLoad> load = ExpertLoad::FromDoubles(1, 1, 4, values);
  ASSERT_TRUE(load.ok());
  const Placement current = *TrivialPlacement(1, 4, 4, 2);
  const Placement better = *PlacementFromPhysicalMap(1, 4, 2, {0, 2, 1, 3});  // 7 vs 3.
  absl::StatusOr<BalanceGain> gain = PredictGain(current, better, *load);
  ASSERT_TRUE(gain.ok());
  EXPECT_DOUBLE_EQ(gain->current_ratio, 8.0 / 5);
  EXPECT_DOUBLE_EQ(gain->proposed_ratio, 7.0 / 5);
  EXPECT_DOUBLE_EQ(gain->relative_gain, 1.0 / 8);
  EXPECT_LT(PredictGain(better, current, *load)->relative_gain, 0);
}

TEST(BalanceRatioLowerBoundTest, KnownValues) {
  // One hot expert, no spare slot: its rank carries all load, 4x the mean.
  absl::StatusOr<ExpertLoad> hot =
      ExpertLoad::FromDoubles(1, 1, 4, std::vector<double>{8, 0, 0, 0});
  EXPECT_DOUBLE_EQ(*BalanceRatioLowerBound(*hot, 4, 4), 4.0);
  // With 4 spare slots the bound reaches the mean: 8 / 5 < 8 / 4.
  EXPECT_DOUBLE_EQ(*BalanceRatioLowerBound(*hot, 8, 4), 1.0);
  EXPECT_EQ(BalanceRatioLowerBound(*hot, 6, 4).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace weir::eplb::policy
