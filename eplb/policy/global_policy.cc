// eplb/policy/global_policy.cc

#include "eplb/policy/global_policy.h"

#include <numeric>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "eplb/policy/layer_plan.h"

namespace weir::eplb::policy {

absl::StatusOr<Placement> RebalanceGlobal(const ExpertLoad& load, int32_t num_physical,
                                          int32_t num_ranks, int num_threads) {
  const int32_t num_layers = load.num_layers();
  const int32_t num_logical = load.num_logical_experts();
  RETURN_IF_ERROR(CheckPlacementShape(num_layers, num_logical, num_physical, num_ranks))
      << "in RebalanceGlobal";
  if (num_threads < 1 || num_threads > kMaxPolicyThreads) {
    return absl::InvalidArgumentError(absl::StrCat("RebalanceGlobal: num_threads ", num_threads,
                                                   " outside [1, ", kMaxPolicyThreads, "]"));
  }
  std::vector<int32_t> experts(num_logical);
  std::iota(experts.begin(), experts.end(), 0);
  std::vector<int32_t> map(static_cast<size_t>(num_layers) * num_physical);
  ForEachLayer(num_layers, num_threads, [&](int l) {
    const std::vector<double> layer = load.LayerByExpert(l);
    PlanLayer(layer, experts, load.num_windows(), num_ranks, num_physical / num_ranks,
              absl::MakeSpan(map).subspan(static_cast<size_t>(l) * num_physical, num_physical));
  });
  return PlacementFromPhysicalMap(num_layers, num_logical, num_ranks, std::move(map));
}

}  // namespace weir::eplb::policy
