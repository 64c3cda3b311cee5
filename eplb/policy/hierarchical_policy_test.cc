// eplb/policy/hierarchical_policy_test.cc

#include "eplb/policy/hierarchical_policy.h"

#include <random>
#include <set>
#include <vector>

#include "eplb/policy/balance.h"
#include "eplb/policy/test_util.h"
#include "gtest/gtest.h"

namespace weir::eplb::policy {
namespace {

ExpertLoad RandomLoad(int windows, int layers, int experts, uint32_t seed) {
  std::mt19937 rng(seed);
  std::gamma_distribution<double> dist(0.5, 100.0);
  return MakeLoad(windows, layers, experts, [&](int, int, int) { return dist(rng); });
}

TEST(RebalanceHierarchicalTest, KeepsEachGroupOnOneNode) {
  // 32 experts in 8 groups of 4; 2 nodes x 4 ranks; 48 slots (6 per rank).
  const ExpertLoad load = RandomLoad(6, 3, 32, 5);
  const HierarchicalOptions options{
      .num_physical = 48, .num_ranks = 8, .num_nodes = 2, .num_groups = 8};
  absl::StatusOr<Placement> p = RebalanceHierarchical(load, options);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_TRUE(IsConsistent(*p, 3, 32, 48, 8));
  for (int l = 0; l < 3; ++l) {
    std::vector<int> groups_per_node(2, 0);
    for (int g = 0; g < 8; ++g) {
      std::set<int> nodes;
      for (int e = g * 4; e < g * 4 + 4; ++e) {
        for (const int rank : RanksOf(*p, l, e)) nodes.insert(rank / 4);
      }
      ASSERT_EQ(nodes.size(), 1u) << "layer " << l << " group " << g;
      ++groups_per_node[*nodes.begin()];
    }
    EXPECT_EQ(groups_per_node, (std::vector<int>{4, 4}));
  }
  absl::StatusOr<Placement> trivial = TrivialPlacement(3, 32, 32, 8);
  ASSERT_TRUE(trivial.ok());
  EXPECT_LT(SumOfMaxRankLoad(*p, load), SumOfMaxRankLoad(*trivial, load));
  EXPECT_EQ(*p, *RebalanceHierarchical(load, options));
  HierarchicalOptions threaded = options;
  threaded.num_threads = 2;
  EXPECT_EQ(*p, *RebalanceHierarchical(load, threaded));
}

TEST(RebalanceHierarchicalTest, SpreadsHotGroupsOverNodes) {
  // Groups 0 and 1 (experts 0-3) carry all load, busy in the same windows.
  const ExpertLoad load = MakeLoad(4, 1, 8, [](int, int, int e) { return e < 4 ? 10.0 : 1.0; });
  const HierarchicalOptions options{
      .num_physical = 8, .num_ranks = 4, .num_nodes = 2, .num_groups = 4};
  absl::StatusOr<Placement> p = RebalanceHierarchical(load, options);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_NE(RanksOf(*p, 0, 0)[0] / 2, RanksOf(*p, 0, 2)[0] / 2);
}

TEST(RebalanceHierarchicalTest, OneNodeEqualsGlobalShape) {
  const ExpertLoad load = RandomLoad(3, 2, 12, 9);
  absl::StatusOr<Placement> p = RebalanceHierarchical(
      load, {.num_physical = 16, .num_ranks = 4, .num_nodes = 1, .num_groups = 3});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_TRUE(IsConsistent(*p, 2, 12, 16, 4));
}

TEST(RebalanceHierarchicalTest, RejectsBadOptions) {
  const ExpertLoad load = RandomLoad(2, 1, 12, 1);
  const auto code = [&](HierarchicalOptions o) {
    return RebalanceHierarchical(load, o).status().code();
  };
  const auto kInvalid = absl::StatusCode::kInvalidArgument;
  EXPECT_EQ(code({.num_physical = 12, .num_ranks = 4, .num_nodes = 3, .num_groups = 3}),
            kInvalid);  // Ranks do not divide over nodes.
  EXPECT_EQ(code({.num_physical = 12, .num_ranks = 4, .num_nodes = 2, .num_groups = 5}),
            kInvalid);  // Experts do not divide into groups.
  EXPECT_EQ(code({.num_physical = 12, .num_ranks = 4, .num_nodes = 2, .num_groups = 3}),
            kInvalid);  // Groups do not divide over nodes.
  EXPECT_EQ(code({.num_physical = 12, .num_ranks = 4, .num_nodes = 0, .num_groups = 4}), kInvalid);
  EXPECT_EQ(code({.num_physical = 12, .num_ranks = 4, .num_nodes = 2, .num_groups = 0}), kInvalid);
  EXPECT_EQ(code({.num_physical = 8, .num_ranks = 4, .num_nodes = 2, .num_groups = 4}),
            kInvalid);  // Fewer slots than experts.
  EXPECT_EQ(code({.num_physical = 14, .num_ranks = 4, .num_nodes = 2, .num_groups = 4}),
            kInvalid);  // Slots do not divide over ranks.
  EXPECT_EQ(
      code(
          {.num_physical = 12, .num_ranks = 4, .num_nodes = 2, .num_groups = 4, .num_threads = -1}),
      kInvalid);
}

}  // namespace
}  // namespace weir::eplb::policy
