// eplb/policy/placement.h
//
// Placement: where every physical expert slot of every MoE layer lives and
// which logical expert it serves. Physical slots are laid out rank-major: rank
// r owns slots [r * slots_per_rank, (r + 1) * slots_per_rank).
//
// Thread safety: value type; safe to copy and share read-only.

#ifndef WEIR_EPLB_POLICY_PLACEMENT_H_
#define WEIR_EPLB_POLICY_PLACEMENT_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/strong_id.h"

namespace weir::eplb::policy {

// Invariants (checked by ValidatePlacement, guaranteed by every factory here):
//  * num_layers, num_logical, num_ranks >= 1; num_physical % num_ranks == 0;
//    num_physical >= num_logical.
//  * every logical expert of every layer has >= 1 replica;
//  * logical_to_physical is the inverse of physical_to_logical: row (l, e)
//    lists the replica_count[l, e] slots serving e in increasing order, then -1s;
//  * max_replicas == max over (l, e) of replica_count[l, e].
struct Placement {
  int32_t num_layers = 0;
  int32_t num_logical = 0;
  int32_t num_physical = 0;
  int32_t num_ranks = 0;
  int32_t max_replicas = 0;
  std::vector<int32_t> physical_to_logical;  // [num_layers, num_physical]
  std::vector<int32_t> logical_to_physical;  // [num_layers, num_logical, max_replicas], -1 padded
  std::vector<int32_t> replica_count;        // [num_layers, num_logical]

  int32_t slots_per_rank() const { return num_physical / num_ranks; }

  // Returns the rank that holds physical slot `physical`.
  // REQUIRES: 0 <= physical < num_physical.
  Rank RankOfSlot(int32_t physical) const { return Rank(physical / slots_per_rank()); }

  // Returns the logical expert served by slot `physical` of `layer`.
  // REQUIRES: indices in range.
  ExpertId LogicalOf(LayerId layer, int32_t physical) const {
    return ExpertId(
        physical_to_logical[static_cast<size_t>(layer.value()) * num_physical + physical]);
  }

  // Returns the number of replicas of `expert` in `layer`.
  // REQUIRES: indices in range.
  int32_t ReplicasOf(LayerId layer, ExpertId expert) const {
    return replica_count[static_cast<size_t>(layer.value()) * num_logical + expert.value()];
  }

  friend bool operator==(const Placement&, const Placement&) = default;
};

// Returns INVALID_ARGUMENT unless every dimension is in [1, kMaxDim],
// num_layers * num_physical <= kMaxElements, num_physical % num_ranks == 0
// and num_physical >= num_logical.
absl::Status CheckPlacementShape(int64_t num_layers, int64_t num_logical, int64_t num_physical,
                                 int64_t num_ranks);

// Builds a complete Placement (inverse map, counts, max_replicas) from a
// physical->logical map `physical_to_logical` [num_layers, num_physical].
// Returns INVALID_ARGUMENT if the sizes are inconsistent, num_physical is not
// a multiple of num_ranks, an entry is outside [0, num_logical), or a logical
// expert of some layer has no slot.
absl::StatusOr<Placement> PlacementFromPhysicalMap(int32_t num_layers, int32_t num_logical,
                                                   int32_t num_ranks,
                                                   std::vector<int32_t> physical_to_logical);

// Returns the placement a system without load balancing uses: slot p serves
// logical expert p % num_logical in every layer (with num_physical ==
// num_logical: expert e on rank e / slots_per_rank, no redundancy).
// Returns INVALID_ARGUMENT on the shape errors of PlacementFromPhysicalMap.
absl::StatusOr<Placement> TrivialPlacement(int32_t num_layers, int32_t num_logical,
                                           int32_t num_physical, int32_t num_ranks);

// Checks every invariant listed on Placement, e.g. for a map received over
// the network. Returns INVALID_ARGUMENT naming the first violation.
absl::Status ValidatePlacement(const Placement& placement);

}  // namespace weir::eplb::policy

#endif  // WEIR_EPLB_POLICY_PLACEMENT_H_
