// eplb/policy/layer_plan.h
//
// The building block shared by the global and hierarchical policies: for one
// layer, replicate a set of logical experts into a block of physical slots
// and pack the replicas onto a block of consecutive ranks.
//
// Thread safety: pure function; safe to call concurrently.

#ifndef WEIR_EPLB_POLICY_LAYER_PLAN_H_
#define WEIR_EPLB_POLICY_LAYER_PLAN_H_

#include <cstdint>
#include <functional>

#include "absl/types/span.h"

namespace weir::eplb::policy {

// Places `experts` (logical ids; their window loads are rows of
// `expert_loads` [experts.size(), num_windows]) onto `num_ranks` ranks of
// `slots_per_rank` slots each: replica counts by ReplicateGreedy over all
// num_ranks * slots_per_rank slots, replicas (each carrying load / count) by
// PackBalanced. Writes the logical id of every slot to `slots`
// [num_ranks * slots_per_rank], rank-major, each rank's slots sorted by
// logical id.
// REQUIRES: 1 <= experts.size() <= num_ranks * slots_per_rank,
//           slots.size() == num_ranks * slots_per_rank, num_windows >= 1.
void PlanLayer(absl::Span<const double> expert_loads, absl::Span<const int32_t> experts,
               int num_windows, int num_ranks, int slots_per_rank, absl::Span<int32_t> slots);

// Calls fn(layer) once for every layer in [0, num_layers), on up to
// `num_threads` threads (the calling thread included); returns when all
// calls have returned. Layers are claimed in increasing order, so the result
// is the same for every thread count when fn(l) writes only layer l's output.
// REQUIRES: num_threads >= 1; fn is safe to call concurrently for different layers.
void ForEachLayer(int num_layers, int num_threads, const std::function<void(int)>& fn);

}  // namespace weir::eplb::policy

#endif  // WEIR_EPLB_POLICY_LAYER_PLAN_H_
