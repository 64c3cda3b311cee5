// eplb/policy/balance.h
//
// Predicts how well a placement balances a given load: the balance ratio is
// max rank load / mean rank load of one MoE layer in one window (1.0 is
// perfect), averaged over windows and layers. A logical expert's load is
// split evenly over its replicas. The service compares the prediction for the
// current and a proposed placement before it moves any weights.
//
// Thread safety: pure functions; safe to call concurrently.

#ifndef WEIR_EPLB_POLICY_BALANCE_H_
#define WEIR_EPLB_POLICY_BALANCE_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "eplb/policy/expert_load.h"
#include "eplb/policy/placement.h"

namespace weir::eplb::policy {

// Returns the balance ratio of `placement` under `load`, averaged over the
// (window, layer) pairs with non-zero load; 1.0 if the load is all zero.
// Returns INVALID_ARGUMENT if the placement breaks an invariant
// (ValidatePlacement) or its layer or logical expert count differs from the
// load's.
absl::StatusOr<double> PredictBalanceRatio(const Placement& placement, const ExpertLoad& load);

// Returns the load each rank serves under `placement`, summed over the
// windows of `load`: [num_layers, num_ranks], row-major (for per-rank views
// such as `weir info`).
// Returns INVALID_ARGUMENT as PredictBalanceRatio does.
absl::StatusOr<std::vector<double>> RankLoads(const Placement& placement, const ExpertLoad& load);

struct BalanceGain {
  double current_ratio = 1.0;   // PredictBalanceRatio(current, load).
  double proposed_ratio = 1.0;  // PredictBalanceRatio(proposed, load).
  // (current_ratio - proposed_ratio) / current_ratio: the predicted fraction
  // of MoE layer time saved; negative if the proposal is worse.
  double relative_gain = 0.0;
};

// Predicts the gain of switching from `current` to `proposed` under `load`.
// Returns INVALID_ARGUMENT as PredictBalanceRatio does, for either placement.
absl::StatusOr<BalanceGain> PredictGain(const Placement& current, const Placement& proposed,
                                        const ExpertLoad& load);

// Returns a lower bound on the balance ratio any placement with
// `num_physical` slots over `num_ranks` ranks can reach under `load`: per
// (window, layer), max(1, best possible max per-replica load / mean rank
// load), averaged as PredictBalanceRatio averages.
// Returns INVALID_ARGUMENT on the shape errors of CheckPlacementShape.
absl::StatusOr<double> BalanceRatioLowerBound(const ExpertLoad& load, int32_t num_physical,
                                              int32_t num_ranks);

}  // namespace weir::eplb::policy

#endif  // WEIR_EPLB_POLICY_BALANCE_H_
