// eplb/policy/replication.cc

#include "eplb/policy/replication.h"

#include <algorithm>
#include <queue>
#include <tuple>
#include <utility>

#include "base/logging.h"

namespace weir::eplb::policy {

std::vector<int> ReplicateGreedy(absl::Span<const double> loads, int num_items, int num_windows,
                                 int num_slots) {
  WEIR_CHECK(num_items >= 1 && num_windows >= 1 && num_slots >= num_items &&
             loads.size() == static_cast<size_t>(num_items) * num_windows)
      << "guaranteed by the policy's input validation";
  const int n = num_items;
  const int w_count = num_windows;
  std::vector<int> count(n, 1);
  std::vector<double> per_replica(loads.begin(), loads.end());  // [n, W]: load / count
  std::vector<double> total(n, 0.0);
  for (int i = 0; i < n; ++i) {
    for (int w = 0; w < w_count; ++w) total[i] += loads[static_cast<size_t>(i) * w_count + w];
  }
  std::vector<double> top1(w_count), top2(w_count), gain(n), tie_gain(n);
  std::vector<int> arg1(w_count);
  for (int step = num_items; step < num_slots; ++step) {
    std::fill(top1.begin(), top1.end(), -1.0);
    std::fill(top2.begin(), top2.end(), -1.0);
    for (int i = 0; i < n; ++i) {
      const double* v = &per_replica[static_cast<size_t>(i) * w_count];
      for (int w = 0; w < w_count; ++w) {
        if (v[w] > top1[w]) {
          top2[w] = top1[w];
          top1[w] = v[w];
          arg1[w] = i;
        } else if (v[w] > top2[w]) {
          top2[w] = v[w];
        }
      }
    }
    std::fill(gain.begin(), gain.end(), 0.0);
    std::fill(tie_gain.begin(), tie_gain.end(), 0.0);
    for (int w = 0; w < w_count; ++w) {
      const int i = arg1[w];
      const double after = loads[static_cast<size_t>(i) * w_count + w] / (count[i] + 1);
      gain[i] += top1[w] - std::max(top2[w], after);
    }
    // Items at (or tied at) a window's maximum: progress toward lowering it.
    // Only windows with a near-tie need a scan over all items.
    for (int w = 0; w < w_count; ++w) {
      const double threshold = top1[w] * (1 - 1e-12);
      if (top2[w] < threshold) {
        tie_gain[arg1[w]] += top1[w] / (count[arg1[w]] + 1);
        continue;
      }
      for (int i = 0; i < n; ++i) {
        const double v = per_replica[static_cast<size_t>(i) * w_count + w];
        if (v >= threshold) tie_gain[i] += v / (count[i] + 1);
      }
    }
    const auto key = [&](int j) {
      return std::make_tuple(gain[j], tie_gain[j], total[j] / (count[j] * (count[j] + 1.0)),
                             -count[j]);
    };
    int best = 0;
    for (int i = 1; i < n; ++i) {
      if (key(i) > key(best)) best = i;  // Strict: ties keep the lowest index.
    }
    ++count[best];
    double* v = &per_replica[static_cast<size_t>(best) * w_count];
    for (int w = 0; w < w_count; ++w) {
      v[w] = loads[static_cast<size_t>(best) * w_count + w] / count[best];
    }
  }
  return count;
}

double MinMaxReplicaLoad(absl::Span<const double> loads, int num_slots) {
  // Max-heap of (per-replica load, -index, count); the top always gets the next slot.
  using Entry = std::tuple<double, int, int>;
  std::priority_queue<Entry> heap;
  for (size_t i = 0; i < loads.size(); ++i) heap.emplace(loads[i], -static_cast<int>(i), 1);
  for (int s = static_cast<int>(loads.size()); s < num_slots; ++s) {
    const int neg_index = std::get<1>(heap.top());
    const int count = std::get<2>(heap.top());
    heap.pop();
    heap.emplace(loads[-neg_index] / (count + 1), neg_index, count + 1);
  }
  return std::get<0>(heap.top());
}

}  // namespace weir::eplb::policy
