// eplb/policy/hierarchical_policy.h
//
// The hierarchical EPLB policy for multi-node prefill, where experts of one
// group should stay on one node to keep group-limited routing inside the
// node: groups of consecutive logical experts are packed onto nodes, then each
// node replicates its experts into its own slots and packs the replicas onto
// its own ranks (the global policy run per node).
//
// Thread safety: pure function; safe to call concurrently.

#ifndef WEIR_EPLB_POLICY_HIERARCHICAL_POLICY_H_
#define WEIR_EPLB_POLICY_HIERARCHICAL_POLICY_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "eplb/policy/expert_load.h"
#include "eplb/policy/global_policy.h"
#include "eplb/policy/placement.h"

namespace weir::eplb::policy {

struct HierarchicalOptions {
  int32_t num_physical = 0;  // Slots per layer over all ranks.
  int32_t num_ranks = 0;     // Ranks over all nodes; node n owns ranks
                             // [n * num_ranks / num_nodes, (n + 1) * num_ranks / num_nodes).
  int32_t num_nodes = 1;
  int32_t num_groups = 1;  // Expert groups; group g = logical experts
                           // [g * E / num_groups, (g + 1) * E / num_groups).
  int num_threads = 1;     // Layers planned concurrently; the result does not depend on it.
};

// Returns a placement in which every replica of a logical expert lives on
// the node its group was assigned to, num_groups / num_nodes groups per node.
// Per layer: groups are packed onto nodes by their window-vector loads (same
// packer as the ranks), then each node runs the global policy on its
// experts, its num_physical / num_nodes slots and its ranks.
// Deterministic; ties go to the lowest index.
// Returns INVALID_ARGUMENT for the shape errors of RebalanceGlobal, or if
// num_nodes < 1, num_groups < 1, num_ranks % num_nodes != 0,
// num_logical % num_groups != 0, num_groups % num_nodes != 0, or num_threads
// is outside [1, kMaxPolicyThreads].
absl::StatusOr<Placement> RebalanceHierarchical(const ExpertLoad& load,
                                                const HierarchicalOptions& options);

}  // namespace weir::eplb::policy

#endif  // WEIR_EPLB_POLICY_HIERARCHICAL_POLICY_H_
