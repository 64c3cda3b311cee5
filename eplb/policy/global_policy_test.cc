// eplb/policy/global_policy_test.cc

#include "eplb/policy/global_policy.h"

#include <cmath>
#include <random>
#include <vector>

#include "eplb/policy/balance.h"
#include "eplb/policy/test_util.h"
#include "gtest/gtest.h"

namespace weir::eplb::policy {
namespace {

// Zipf-like popularity whose order differs per layer and drifts per window.
ExpertLoad SkewedLoad(int windows, int layers, int experts, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int> rank(static_cast<size_t>(layers) * experts);
  for (int i = 0; i < static_cast<int>(rank.size()); ++i) rank[i] = static_cast<int>(rng() % 997);
  std::uniform_real_distribution<double> noise(0.8, 1.2);
  return MakeLoad(windows, layers, experts, [&](int w, int l, int e) {
    const int r = (rank[l * experts + e] + w) % experts;
    return 1000.0 / (1 + r) * noise(rng);
  });
}

struct Shape {
  int experts, physical, ranks;
};

TEST(RebalanceGlobalTest, PlacementsAreConsistentAndNeverWorseThanTrivial) {
  for (const Shape s : {Shape{8, 8, 4}, Shape{8, 12, 4}, Shape{16, 16, 8}, Shape{16, 24, 8},
                        Shape{12, 12, 1}, Shape{32, 40, 8}, Shape{6, 18, 6}}) {
    for (uint32_t seed = 0; seed < 4; ++seed) {
      const ExpertLoad load = SkewedLoad(5, 3, s.experts, seed);
      absl::StatusOr<Placement> p = RebalanceGlobal(load, s.physical, s.ranks);
      ASSERT_TRUE(p.ok()) << p.status();
      EXPECT_TRUE(IsConsistent(*p, 3, s.experts, s.physical, s.ranks));
      absl::StatusOr<Placement> trivial = TrivialPlacement(3, s.experts, s.experts, s.ranks);
      ASSERT_TRUE(trivial.ok());
      EXPECT_LE(SumOfMaxRankLoad(*p, load), SumOfMaxRankLoad(*trivial, load) * (1 + 1e-12))
          << s.experts << "/" << s.physical << "/" << s.ranks << " seed " << seed;
    }
  }
}

TEST(RebalanceGlobalTest, IsDeterministic) {
  const ExpertLoad load = SkewedLoad(7, 4, 24, 3);
  absl::StatusOr<Placement> a = RebalanceGlobal(load, 32, 8);
  absl::StatusOr<Placement> b = RebalanceGlobal(ExpertLoad(load), 32, 8);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*a, *b);
  // Layers planned on several threads give the same placement.
  absl::StatusOr<Placement> threaded = RebalanceGlobal(load, 32, 8, /*num_threads=*/3);
  ASSERT_TRUE(threaded.ok());
  EXPECT_EQ(*a, *threaded);
}

TEST(RebalanceGlobalTest, OneExpertTakesAllLoad) {
  const ExpertLoad load = MakeLoad(3, 2, 8, [](int, int, int e) { return e == 5 ? 100.0 : 0.0; });
  absl::StatusOr<Placement> p = RebalanceGlobal(load, 12, 4);  // 4 redundant slots.
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_TRUE(IsConsistent(*p, 2, 8, 12, 4));
  for (int l = 0; l < 2; ++l) {
    EXPECT_EQ(p->ReplicasOf(LayerId(l), ExpertId(5)), 5);
    std::vector<int> ranks = RanksOf(*p, l, 5);
    std::sort(ranks.begin(), ranks.end());
    // 5 replicas on 4 ranks: every rank holds one, one rank holds two.
    EXPECT_EQ(std::unique(ranks.begin(), ranks.end()) - ranks.begin(), 4);
  }
  absl::StatusOr<double> ratio = PredictBalanceRatio(*p, load);
  ASSERT_TRUE(ratio.ok());
  EXPECT_DOUBLE_EQ(*ratio, (2 * 100.0 / 5) / (100.0 / 4));
  // Without redundancy nothing helps, but nothing breaks either.
  absl::StatusOr<Placement> none = RebalanceGlobal(load, 8, 4);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(IsConsistent(*none, 2, 8, 8, 4));
}

TEST(RebalanceGlobalTest, EqualAndZeroLoadsAreBalanced) {
  const ExpertLoad equal = MakeLoad(4, 2, 16, [](int, int, int) { return 3.0; });
  absl::StatusOr<Placement> p = RebalanceGlobal(equal, 16, 4);
  ASSERT_TRUE(p.ok());
  EXPECT_DOUBLE_EQ(*PredictBalanceRatio(*p, equal), 1.0);
  const ExpertLoad zero = MakeLoad(2, 2, 16, [](int, int, int) { return 0.0; });
  absl::StatusOr<Placement> z = RebalanceGlobal(zero, 24, 8);
  ASSERT_TRUE(z.ok());
  EXPECT_TRUE(IsConsistent(*z, 2, 16, 24, 8));
  EXPECT_EQ(*z, *RebalanceGlobal(zero, 24, 8));
}

TEST(RebalanceGlobalTest, SingleRankHoldsEverything) {
  const ExpertLoad load = SkewedLoad(2, 2, 5, 1);
  absl::StatusOr<Placement> p = RebalanceGlobal(load, 7, 1);
  ASSERT_TRUE(p.ok());
  EXPECT_TRUE(IsConsistent(*p, 2, 5, 7, 1));
  EXPECT_DOUBLE_EQ(*PredictBalanceRatio(*p, load), 1.0);
}

TEST(RebalanceGlobalTest, CoActivatedExpertsLandOnDifferentRanks) {
  // Experts 0 and 2 are hot in even windows, 1 and 3 in odd windows; all
  // totals are equal, so only the window vectors tell them apart.
  const ExpertLoad load =
      MakeLoad(6, 1, 4, [](int w, int, int e) { return (w % 2 == e % 2) ? 10.0 : 0.0; });
  absl::StatusOr<Placement> p = RebalanceGlobal(load, 4, 2);
  ASSERT_TRUE(p.ok());
  EXPECT_NE(RanksOf(*p, 0, 0), RanksOf(*p, 0, 2));
  EXPECT_NE(RanksOf(*p, 0, 1), RanksOf(*p, 0, 3));
  EXPECT_DOUBLE_EQ(*PredictBalanceRatio(*p, load), 1.0);
}

TEST(RebalanceGlobalTest, RejectsBadShapes) {
  const ExpertLoad load = SkewedLoad(2, 2, 8, 0);
  const auto kInvalid = absl::StatusCode::kInvalidArgument;
  EXPECT_EQ(RebalanceGlobal(load, 10, 4).status().code(), kInvalid);  // 10 % 4 != 0.
  EXPECT_EQ(RebalanceGlobal(load, 4, 4).status().code(), kInvalid);   // Fewer slots than experts.
  EXPECT_EQ(RebalanceGlobal(load, 8, 0).status().code(), kInvalid);
  EXPECT_EQ(RebalanceGlobal(load, -8, -4).status().code(), kInvalid);
  EXPECT_EQ(RebalanceGlobal(load, 8, 16).status().code(), kInvalid);  // 8 % 16 != 0.
  EXPECT_EQ(RebalanceGlobal(load, 8, 4, /*num_threads=*/0).status().code(), kInvalid);
}

}  // namespace
}  // namespace weir::eplb::policy
