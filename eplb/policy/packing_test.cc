// eplb/policy/packing_test.cc

#include "eplb/policy/packing.h"

#include <algorithm>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace weir::eplb::policy {
namespace {

std::vector<int> Capacities(const std::vector<int>& bin_of, int num_bins) {
  std::vector<int> count(num_bins, 0);
  for (const int b : bin_of) {
    EXPECT_TRUE(b >= 0 && b < num_bins);
    ++count[b];
  }
  return count;
}

TEST(PackBalancedTest, SeparatesItemsBusyInTheSameWindows) {
  // [4 items, 2 windows]; all totals equal, so a scalar LPT would put the
  // co-active items 0 and 2 together.
  const std::vector<double> loads = {10, 0, /*1*/ 0, 10, /*2*/ 10, 0, /*3*/ 0, 10};
  const std::vector<int> bin_of = PackBalanced(loads, 4, 2, 2, 2);
  EXPECT_NE(bin_of[0], bin_of[2]);
  EXPECT_NE(bin_of[1], bin_of[3]);
  EXPECT_DOUBLE_EQ(PackingObjective(loads, 4, 2, 2, bin_of), 20.0);
}

TEST(PackBalancedTest, RespectsCapacityEvenWhenOneItemDominates) {
  std::vector<double> loads(12 * 3, 1.0);  // [12 items, 3 windows]
  loads[0] = loads[1] = loads[2] = 1000;
  const std::vector<int> bin_of = PackBalanced(loads, 12, 3, 4, 3);
  EXPECT_EQ(Capacities(bin_of, 4), (std::vector<int>{3, 3, 3, 3}));
  EXPECT_DOUBLE_EQ(PackingObjective(loads, 12, 3, 4, bin_of), 3 * 1002.0);
}

TEST(PackBalancedTest, ResultIsSwapOptimalAndBeatsContiguousAssignment) {
  std::mt19937 rng(11);
  std::gamma_distribution<double> dist(0.7, 10.0);
  for (int trial = 0; trial < 20; ++trial) {
    const int bins = 2 + trial % 5, capacity = 1 + trial % 4, windows = 1 + trial % 6;
    const int n = bins * capacity;
    std::vector<double> loads(static_cast<size_t>(n) * windows);
    for (double& v : loads) v = dist(rng);
    std::vector<int> bin_of = PackBalanced(loads, n, windows, bins, capacity);
    EXPECT_EQ(Capacities(bin_of, bins), std::vector<int>(bins, capacity));
    const double objective = PackingObjective(loads, n, windows, bins, bin_of);
    std::vector<int> contiguous(n);
    for (int i = 0; i < n; ++i) contiguous[i] = i / capacity;
    EXPECT_LE(objective, PackingObjective(loads, n, windows, bins, contiguous) + 1e-9);
    // No exchange of two items lowers the objective noticeably.
    for (int a = 0; a < n; ++a) {
      for (int b = a + 1; b < n; ++b) {
        if (bin_of[a] == bin_of[b]) continue;
        std::swap(bin_of[a], bin_of[b]);
        EXPECT_GE(PackingObjective(loads, n, windows, bins, bin_of), objective * (1 - 1e-4))
            << "trial " << trial << " swap " << a << "," << b;
        std::swap(bin_of[a], bin_of[b]);
      }
    }
  }
}

// Largest-first on totals, written independently: the start PackBalanced
// never ends above.
std::vector<int> LargestFirstOnTotals(const std::vector<double>& loads, int n, int windows,
                                      int bins, int capacity) {
  std::vector<double> total(n, 0.0);
  for (int i = 0; i < n; ++i) {
    for (int w = 0; w < windows; ++w) total[i] += loads[i * windows + w];
  }
  std::vector<int> order(n);
  for (int i = 0; i < n; ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return total[a] > total[b]; });
  std::vector<double> bin_total(bins, 0.0);
  std::vector<int> size(bins, 0), bin_of(n, -1);
  for (const int i : order) {
    int best = -1;
    for (int b = 0; b < bins; ++b) {
      if (size[b] < capacity && (best < 0 || bin_total[b] < bin_total[best])) best = b;
    }
    bin_of[i] = best;
    ++size[best];
    bin_total[best] += total[i];
  }
  return bin_of;
}

TEST(PackBalancedTest, NeverEndsAboveTheLargestFirstStart) {
  std::mt19937 rng(5);
  std::gamma_distribution<double> size(0.8, 10.0);
  std::lognormal_distribution<double> burst(0.0, 0.5);
  for (int trial = 0; trial < 12; ++trial) {
    const int bins = 2 + trial % 6, capacity = 2 + trial % 5, windows = 3 + trial % 9;
    const int n = bins * capacity;
    // Items come in groups of `bins` sharing one activity factor per window:
    // a group is best spread over all bins.
    std::vector<double> factor(static_cast<size_t>(capacity) * windows);
    for (double& f : factor) f = burst(rng);
    std::vector<double> loads(static_cast<size_t>(n) * windows);
    for (int i = 0; i < n; ++i) {
      const double base = size(rng);
      for (int w = 0; w < windows; ++w) {
        loads[i * windows + w] = base * factor[(i / bins) * windows + w];
      }
    }
    const std::vector<int> bin_of = PackBalanced(loads, n, windows, bins, capacity);
    EXPECT_EQ(Capacities(bin_of, bins), std::vector<int>(bins, capacity));
    const double objective = PackingObjective(loads, n, windows, bins, bin_of);
    const std::vector<int> start = LargestFirstOnTotals(loads, n, windows, bins, capacity);
    EXPECT_LE(objective, PackingObjective(loads, n, windows, bins, start) * (1 + 1e-12))
        << "trial " << trial;
  }
}

TEST(PackBalancedTest, SpreadsGroupsThatLargestFirstStacks) {
  // [16 items, 4 windows]: item i carries 10 in window i % 4 only. All totals
  // tie, so largest-first puts each window's four items in one bin (160).
  std::vector<double> loads(16 * 4, 0.0);
  for (int i = 0; i < 16; ++i) loads[i * 4 + i % 4] = 10;
  const std::vector<int> start = LargestFirstOnTotals(loads, 16, 4, 4, 4);
  EXPECT_DOUBLE_EQ(PackingObjective(loads, 16, 4, 4, start), 160.0);
  const std::vector<int> bin_of = PackBalanced(loads, 16, 4, 4, 4);
  EXPECT_DOUBLE_EQ(PackingObjective(loads, 16, 4, 4, bin_of), 40.0);
}

TEST(PackBalancedTest, IsDeterministicAndHandlesZeroLoad) {
  const std::vector<double> zero(8 * 2, 0.0);
  const std::vector<int> first = PackBalanced(zero, 8, 2, 4, 2);
  EXPECT_EQ(first, PackBalanced(zero, 8, 2, 4, 2));
  EXPECT_EQ(Capacities(first, 4), (std::vector<int>{2, 2, 2, 2}));
  EXPECT_EQ(PackingObjective(zero, 8, 2, 4, first), 0.0);
  // A single bin takes everything.
  EXPECT_EQ(PackBalanced(std::vector<double>{1, 2, 3}, 3, 1, 1, 3), (std::vector<int>{0, 0, 0}));
}

}  // namespace
}  // namespace weir::eplb::policy
