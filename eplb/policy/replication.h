// eplb/policy/replication.h
//
// Chooses how many physical replicas each logical expert gets. A replica of
// an expert with `c` replicas serves 1/c of its load (tokens are spread evenly
// over replicas), so replicas cut the hottest per-slot load.
//
// Thread safety: pure functions; safe to call concurrently.

#ifndef WEIR_EPLB_POLICY_REPLICATION_H_
#define WEIR_EPLB_POLICY_REPLICATION_H_

#include <vector>

#include "absl/types/span.h"

namespace weir::eplb::policy {

// Returns replica counts [num_items] (each >= 1, summing to num_slots) that
// greedily minimize sum over windows of max over items of load / count:
// each extra slot goes to the item whose extra replica lowers that objective
// most. Ties (no item lowers it, e.g. several items share the maximum) go to
// the item that most lowers the maximum in the windows where it attains it,
// then to the largest per-replica load reduction, then to the item with the
// fewest replicas, then to the lowest index.
// `loads` is [num_items, num_windows] row-major.
// REQUIRES: num_items >= 1, num_windows >= 1, num_slots >= num_items,
//           loads.size() == num_items * num_windows, loads finite and >= 0.
std::vector<int> ReplicateGreedy(absl::Span<const double> loads, int num_items, int num_windows,
                                 int num_slots);

// Returns the smallest possible maximum of load[i] / count[i] over counts
// >= 1 summing to num_slots, for one window `loads` [num_items] (water
// filling, exact). A lower bound on any placement's max slot load.
// REQUIRES: !loads.empty(), num_slots >= loads.size(), loads >= 0.
double MinMaxReplicaLoad(absl::Span<const double> loads, int num_slots);

}  // namespace weir::eplb::policy

#endif  // WEIR_EPLB_POLICY_REPLICATION_H_
