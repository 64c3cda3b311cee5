// eplb/policy/global_policy.h
//
// The global EPLB policy: every rank may hold any logical expert. Replicates
// hot experts into the redundant slots, then packs all replicas onto ranks so
// that the sum over windows of the most loaded rank is small. Used for decode
// and for single-node or fully connected deployments.
//
// Thread safety: pure function; safe to call concurrently.

#ifndef WEIR_EPLB_POLICY_GLOBAL_POLICY_H_
#define WEIR_EPLB_POLICY_GLOBAL_POLICY_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "eplb/policy/expert_load.h"
#include "eplb/policy/placement.h"

namespace weir::eplb::policy {

inline constexpr int kMaxPolicyThreads = 256;

// Returns a placement of `load.num_logical_experts()` logical experts per
// layer onto `num_physical` slots over `num_ranks` ranks
// (num_physical / num_ranks slots each), every layer planned independently.
// Per layer: each of the num_physical - num_logical redundant slots goes to
// the expert whose extra replica most lowers sum over windows of the maximum
// per-replica load; then replicas are packed onto ranks (greedy on window
// vectors, then improving swaps) to lower sum over windows of the maximum
// rank load. Deterministic; ties go to the lowest index.
//
//   ASSIGN_OR_RETURN(ExpertLoad load, ExpertLoad::FromCounts(w, l, e, counts));
//   ASSIGN_OR_RETURN(Placement next, RebalanceGlobal(load, /*num_physical=*/448,
//                                                    /*num_ranks=*/64));
//
// Layers are planned on up to `num_threads` threads (the caller's included);
// the result does not depend on the thread count.
// Returns INVALID_ARGUMENT if num_ranks < 1, num_physical is not a multiple
// of num_ranks, num_physical < num_logical_experts, or num_threads is outside
// [1, kMaxPolicyThreads].
absl::StatusOr<Placement> RebalanceGlobal(const ExpertLoad& load, int32_t num_physical,
                                          int32_t num_ranks, int num_threads = 1);

}  // namespace weir::eplb::policy

#endif  // WEIR_EPLB_POLICY_GLOBAL_POLICY_H_
