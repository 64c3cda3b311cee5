// eplb/policy/layer_plan.cc

#include "eplb/policy/layer_plan.h"

#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

#include "base/logging.h"
#include "eplb/policy/packing.h"
#include "eplb/policy/replication.h"

namespace weir::eplb::policy {

void PlanLayer(absl::Span<const double> expert_loads, absl::Span<const int32_t> experts,
               int num_windows, int num_ranks, int slots_per_rank, absl::Span<int32_t> slots) {
  const int n = static_cast<int>(experts.size());
  const int num_slots = num_ranks * slots_per_rank;
  WEIR_CHECK(n >= 1 && n <= num_slots && static_cast<int>(slots.size()) == num_slots)
      << "guaranteed by the policy's input validation";
  const std::vector<int> count = ReplicateGreedy(expert_loads, n, num_windows, num_slots);

  // One row per replica: [num_slots, num_windows]; replica_owner maps back to the expert.
  std::vector<double> replica_loads(static_cast<size_t>(num_slots) * num_windows);
  std::vector<int> replica_owner(num_slots);
  int r = 0;
  for (int i = 0; i < n; ++i) {
    for (int k = 0; k < count[i]; ++k, ++r) {
      replica_owner[r] = i;
      for (int w = 0; w < num_windows; ++w) {
        replica_loads[static_cast<size_t>(r) * num_windows + w] =
            expert_loads[static_cast<size_t>(i) * num_windows + w] / count[i];
      }
    }
  }
  const std::vector<int> rank_of =
      PackBalanced(replica_loads, num_slots, num_windows, num_ranks, slots_per_rank);

  std::vector<int> next(num_ranks, 0);
  for (int rep = 0; rep < num_slots; ++rep) {
    const int rank = rank_of[rep];
    slots[static_cast<size_t>(rank) * slots_per_rank + next[rank]++] = experts[replica_owner[rep]];
  }
  for (int rank = 0; rank < num_ranks; ++rank) {
    auto begin = slots.begin() + static_cast<ptrdiff_t>(rank) * slots_per_rank;
    std::sort(begin, begin + slots_per_rank);
  }
}

void ForEachLayer(int num_layers, int num_threads, const std::function<void(int)>& fn) {
  std::atomic<int> next{0};
  const auto work = [&] {
    for (int l = next.fetch_add(1); l < num_layers; l = next.fetch_add(1)) fn(l);
  };
  std::vector<std::thread> helpers;
  for (int t = 1; t < std::min(num_threads, num_layers); ++t) helpers.emplace_back(work);
  work();
  for (std::thread& helper : helpers) helper.join();
}

}  // namespace weir::eplb::policy
