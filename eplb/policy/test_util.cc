// eplb/policy/test_util.cc

#include "eplb/policy/test_util.h"

#include <algorithm>
#include <cstdlib>
#include <vector>

namespace weir::eplb::policy {

ExpertLoad MakeLoad(int num_windows, int num_layers, int num_logical,
                    const std::function<double(int, int, int)>& fn) {
  std::vector<double> values;
  for (int w = 0; w < num_windows; ++w) {
    for (int l = 0; l < num_layers; ++l) {
      for (int e = 0; e < num_logical; ++e) values.push_back(fn(w, l, e));
    }
  }
  absl::StatusOr<ExpertLoad> load =
      ExpertLoad::FromDoubles(num_windows, num_layers, num_logical, values);
  if (!load.ok()) std::abort();  // A bad formula in a test.
  return *std::move(load);
}

testing::AssertionResult IsConsistent(const Placement& p, int num_layers, int num_logical,
                                      int num_physical, int num_ranks) {
  if (p.num_layers != num_layers || p.num_logical != num_logical ||
      p.num_physical != num_physical || p.num_ranks != num_ranks) {
    return testing::AssertionFailure() << "dimensions differ";
  }
  if (p.physical_to_logical.size() != static_cast<size_t>(num_layers) * num_physical ||
      p.replica_count.size() != static_cast<size_t>(num_layers) * num_logical ||
      p.logical_to_physical.size() !=
          static_cast<size_t>(num_layers) * num_logical * p.max_replicas) {
    return testing::AssertionFailure() << "map sizes differ";
  }
  const int slots_per_rank = num_physical / num_ranks;
  int max_count = 0;
  for (int l = 0; l < num_layers; ++l) {
    std::vector<int> per_rank(num_ranks, 0);
    std::vector<int> seen(num_logical, 0);
    for (int s = 0; s < num_physical; ++s) {
      const int e = p.physical_to_logical[l * num_physical + s];
      if (e < 0 || e >= num_logical) return testing::AssertionFailure() << "bad expert " << e;
      ++seen[e];
      ++per_rank[s / slots_per_rank];
      // The inverse map must list slot s in row (l, e).
      const int* row = &p.logical_to_physical[(l * num_logical + e) * p.max_replicas];
      if (std::find(row, row + p.max_replicas, s) == row + p.max_replicas) {
        return testing::AssertionFailure() << "slot " << s << " missing from inverse map";
      }
    }
    for (int r = 0; r < num_ranks; ++r) {
      if (per_rank[r] != slots_per_rank) return testing::AssertionFailure() << "rank capacity";
    }
    for (int e = 0; e < num_logical; ++e) {
      if (seen[e] < 1) return testing::AssertionFailure() << "expert " << e << " has no replica";
      if (seen[e] != p.replica_count[l * num_logical + e]) {
        return testing::AssertionFailure() << "replica_count of expert " << e;
      }
      max_count = std::max(max_count, seen[e]);
      const int* row = &p.logical_to_physical[(l * num_logical + e) * p.max_replicas];
      for (int k = 0; k < p.max_replicas; ++k) {
        const bool used = k < seen[e];
        if (used != (row[k] >= 0)) return testing::AssertionFailure() << "padding of " << e;
        if (used && p.physical_to_logical[l * num_physical + row[k]] != e) {
          return testing::AssertionFailure() << "inverse map of expert " << e;
        }
      }
    }
  }
  if (max_count != p.max_replicas) return testing::AssertionFailure() << "max_replicas";
  return testing::AssertionSuccess();
}

double SumOfMaxRankLoad(const Placement& p, const ExpertLoad& load) {
  const int slots_per_rank = p.num_physical / p.num_ranks;
  double sum = 0;
  for (int w = 0; w < load.num_windows(); ++w) {
    for (int l = 0; l < p.num_layers; ++l) {
      std::vector<double> rank(p.num_ranks, 0.0);
      for (int s = 0; s < p.num_physical; ++s) {
        const int e = p.physical_to_logical[l * p.num_physical + s];
        rank[s / slots_per_rank] += load.at(w, l, e) / p.replica_count[l * p.num_logical + e];
      }
      sum += *std::max_element(rank.begin(), rank.end());
    }
  }
  return sum;
}

std::vector<int> RanksOf(const Placement& p, int layer, int expert) {
  std::vector<int> ranks;
  for (int s = 0; s < p.num_physical; ++s) {
    if (p.physical_to_logical[layer * p.num_physical + s] == expert) {
      ranks.push_back(s / (p.num_physical / p.num_ranks));
    }
  }
  return ranks;
}

}  // namespace weir::eplb::policy
