// tools/bench/eplb_trace.cc

#include "tools/bench/eplb_trace.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

namespace weir::bench {

std::vector<int64_t> GenerateTrace(const TraceOptions& o) {
  const int e_count = o.num_experts;
  std::vector<int64_t> counts(static_cast<size_t>(o.num_windows) * o.num_layers * e_count);
  std::vector<double> zipf(e_count);
  for (int r = 0; r < e_count; ++r) zipf[r] = 1.0 / std::pow(r + 1.0, o.zipf_exponent);
  const int num_groups = (e_count + o.group_size - 1) / o.group_size;
  const int swaps_per_window = static_cast<int>(std::lround(o.drift_swaps * e_count));

  for (int l = 0; l < o.num_layers; ++l) {
    std::mt19937_64 rng(o.seed * 1000003 + l);
    // order[r] = the expert with the r-th highest popularity.
    std::vector<int> order(e_count);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    // Co-activation groups: a random partition, fixed for the whole trace.
    std::vector<int> group_of(e_count);
    std::vector<int> members(e_count);
    std::iota(members.begin(), members.end(), 0);
    std::shuffle(members.begin(), members.end(), rng);
    for (int i = 0; i < e_count; ++i) group_of[members[i]] = i / o.group_size;

    std::uniform_int_distribution<int> position(0, std::max(0, e_count - 2));
    std::normal_distribution<double> normal(0.0, 1.0);
    std::vector<double> state(num_groups);  // AR(1), stationary N(0, 1).
    for (double& z : state) z = normal(rng);
    std::vector<double> burst(num_groups);
    const double innovation = std::sqrt(1 - o.burst_corr * o.burst_corr);
    std::vector<double> weight(e_count);
    for (int w = 0; w < o.num_windows; ++w) {
      for (int s = 0; s < swaps_per_window && e_count > 1; ++s) {
        const int r = position(rng);
        std::swap(order[r], order[r + 1]);
      }
      for (int g = 0; g < num_groups; ++g) {
        if (w > 0) state[g] = o.burst_corr * state[g] + innovation * normal(rng);
        burst[g] = std::exp(o.burst_sigma * state[g] - 0.5 * o.burst_sigma * o.burst_sigma);
      }
      double sum = 0;
      for (int r = 0; r < e_count; ++r) {
        weight[order[r]] = zipf[r] * burst[group_of[order[r]]];
        sum += weight[order[r]];
      }
      const double assignments = static_cast<double>(o.tokens_per_window) * o.top_k;
      int64_t* row = &counts[(static_cast<size_t>(w) * o.num_layers + l) * e_count];
      for (int e = 0; e < e_count; ++e) {
        std::poisson_distribution<int64_t> poisson(assignments * weight[e] / sum);
        row[e] = poisson(rng);
      }
    }
  }
  return counts;
}

}  // namespace weir::bench
