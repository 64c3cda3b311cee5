// eplb/policy/balance.cc

#include "eplb/policy/balance.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "eplb/policy/replication.h"

namespace weir::eplb::policy {

namespace {

absl::Status CheckMatches(const Placement& placement, const ExpertLoad& load) {
  RETURN_IF_ERROR(ValidatePlacement(placement));
  if (placement.num_layers != load.num_layers() ||
      placement.num_logical != load.num_logical_experts()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "placement has ", placement.num_layers, " layers x ", placement.num_logical,
        " logical experts, load has ", load.num_layers(), " x ", load.num_logical_experts()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<double>> RankLoads(const Placement& placement, const ExpertLoad& load) {
  RETURN_IF_ERROR(CheckMatches(placement, load));
  std::vector<double> out(static_cast<size_t>(placement.num_layers) * placement.num_ranks, 0.0);
  for (int w = 0; w < load.num_windows(); ++w) {
    for (int l = 0; l < placement.num_layers; ++l) {
      for (int p = 0; p < placement.num_physical; ++p) {
        const ExpertId e = placement.LogicalOf(LayerId(l), p);
        out[static_cast<size_t>(l) * placement.num_ranks + placement.RankOfSlot(p).value()] +=
            load.at(w, l, e.value()) / placement.ReplicasOf(LayerId(l), e);
      }
    }
  }
  return out;
}

absl::StatusOr<double> PredictBalanceRatio(const Placement& placement, const ExpertLoad& load) {
  RETURN_IF_ERROR(CheckMatches(placement, load));
  const int num_ranks = placement.num_ranks;
  const int slots_per_rank = placement.slots_per_rank();
  std::vector<double> rank_load(num_ranks);
  double ratio_sum = 0;
  int64_t counted = 0;
  for (int w = 0; w < load.num_windows(); ++w) {
    for (int l = 0; l < placement.num_layers; ++l) {
      const int32_t* slots =
          &placement.physical_to_logical[static_cast<size_t>(l) * placement.num_physical];
      const int32_t* count =
          &placement.replica_count[static_cast<size_t>(l) * placement.num_logical];
      std::fill(rank_load.begin(), rank_load.end(), 0.0);
      double total = 0;
      for (int p = 0; p < placement.num_physical; ++p) {
        const double share = load.at(w, l, slots[p]) / count[slots[p]];
        rank_load[p / slots_per_rank] += share;
        total += share;
      }
      if (total <= 0) continue;
      ratio_sum += *std::max_element(rank_load.begin(), rank_load.end()) / (total / num_ranks);
      ++counted;
    }
  }
  return counted == 0 ? 1.0 : ratio_sum / counted;
}

absl::StatusOr<BalanceGain> PredictGain(const Placement& current, const Placement& proposed,
                                        const ExpertLoad& load) {
  BalanceGain gain;
  ASSIGN_OR_RETURN(gain.current_ratio, PredictBalanceRatio(current, load));
  ASSIGN_OR_RETURN(gain.proposed_ratio, PredictBalanceRatio(proposed, load));
  gain.relative_gain = (gain.current_ratio - gain.proposed_ratio) / gain.current_ratio;
  return gain;
}

absl::StatusOr<double> BalanceRatioLowerBound(const ExpertLoad& load, int32_t num_physical,
                                              int32_t num_ranks) {
  RETURN_IF_ERROR(
      CheckPlacementShape(load.num_layers(), load.num_logical_experts(), num_physical, num_ranks));
  std::vector<double> row(load.num_logical_experts());
  double ratio_sum = 0;
  int64_t counted = 0;
  for (int w = 0; w < load.num_windows(); ++w) {
    for (int l = 0; l < load.num_layers(); ++l) {
      double total = 0;
      for (int e = 0; e < load.num_logical_experts(); ++e) {
        row[e] = load.at(w, l, e);
        total += row[e];
      }
      if (total <= 0) continue;
      const double mean = total / num_ranks;
      ratio_sum += std::max(1.0, MinMaxReplicaLoad(row, num_physical) / mean);
      ++counted;
    }
  }
  return counted == 0 ? 1.0 : ratio_sum / counted;
}

}  // namespace weir::eplb::policy
