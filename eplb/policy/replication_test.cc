// eplb/policy/replication_test.cc

#include "eplb/policy/replication.h"

#include <algorithm>
#include <numeric>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace weir::eplb::policy {
namespace {

double MaxPerReplica(const std::vector<double>& loads, const std::vector<int>& count) {
  double top = 0;
  for (size_t i = 0; i < loads.size(); ++i) top = std::max(top, loads[i] / count[i]);
  return top;
}

TEST(ReplicateGreedyTest, GivesExtraSlotsToTheHotExpert) {
  const std::vector<double> loads = {100, 10, 10, 10};  // [4 items, 1 window]
  EXPECT_EQ(ReplicateGreedy(loads, 4, 1, 8), (std::vector<int>{5, 1, 1, 1}));
  EXPECT_EQ(ReplicateGreedy(loads, 4, 1, 4), (std::vector<int>{1, 1, 1, 1}));
}

TEST(ReplicateGreedyTest, MatchesWaterFillingOnOneWindow) {
  std::mt19937 rng(7);
  std::exponential_distribution<double> dist(0.1);
  for (int trial = 0; trial < 50; ++trial) {
    const int n = 3 + trial % 17;
    const int slots = n + trial % 23;
    std::vector<double> loads(n);
    for (double& v : loads) v = dist(rng);
    const std::vector<int> count = ReplicateGreedy(loads, n, 1, slots);
    EXPECT_EQ(std::accumulate(count.begin(), count.end(), 0), slots);
    EXPECT_GE(*std::min_element(count.begin(), count.end()), 1);
    EXPECT_DOUBLE_EQ(MaxPerReplica(loads, count), MinMaxReplicaLoad(loads, slots));
  }
}

TEST(ReplicateGreedyTest, ServesEachWindowsHotExpert) {
  // [3 items, 2 windows]: item 0 hot in window 0, item 2 hot in window 1.
  const std::vector<double> loads = {9, 1, /*item 1*/ 2, 2, /*item 2*/ 1, 8};
  EXPECT_EQ(ReplicateGreedy(loads, 3, 2, 5), (std::vector<int>{2, 1, 2}));
}

TEST(ReplicateGreedyTest, BreaksTiesByLowestIndex) {
  const std::vector<double> equal(6, 5.0);
  EXPECT_EQ(ReplicateGreedy(equal, 6, 1, 9), (std::vector<int>{2, 2, 2, 1, 1, 1}));
  const std::vector<double> zero(4 * 3, 0.0);
  EXPECT_EQ(ReplicateGreedy(zero, 4, 3, 6), (std::vector<int>{2, 2, 1, 1}));
}

TEST(ReplicateGreedyTest, TiedHotExpertsBothGetReplicas) {
  // Items 0 and 1 share the maximum: one extra replica alone does not lower it.
  const std::vector<double> loads = {10, 10, 6, 1};
  EXPECT_EQ(ReplicateGreedy(loads, 4, 1, 6), (std::vector<int>{2, 2, 1, 1}));
}

TEST(MinMaxReplicaLoadTest, KnownValues) {
  EXPECT_DOUBLE_EQ(MinMaxReplicaLoad(std::vector<double>{6, 1, 1}, 4), 3.0);
  EXPECT_DOUBLE_EQ(MinMaxReplicaLoad(std::vector<double>{8, 0, 0, 0}, 4), 8.0);
  EXPECT_DOUBLE_EQ(MinMaxReplicaLoad(std::vector<double>{9, 4}, 5), 3.0);
  EXPECT_DOUBLE_EQ(MinMaxReplicaLoad(std::vector<double>{0, 0}, 3), 0.0);
}

}  // namespace
}  // namespace weir::eplb::policy
