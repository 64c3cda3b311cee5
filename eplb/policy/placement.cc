// eplb/policy/placement.cc

#include "eplb/policy/placement.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "eplb/policy/expert_load.h"

namespace weir::eplb::policy {
absl::Status CheckPlacementShape(int64_t num_layers, int64_t num_logical, int64_t num_physical,
                                 int64_t num_ranks) {
  if (num_layers < 1 || num_logical < 1 || num_ranks < 1 || num_physical < 1 ||
      num_layers > kMaxDim || num_logical > kMaxDim || num_physical > kMaxDim ||
      num_ranks > kMaxDim) {
    return absl::InvalidArgumentError(
        absl::StrCat("placement: dimensions must be in [1, ", kMaxDim, "]: layers=", num_layers,
                     " logical=", num_logical, " physical=", num_physical, " ranks=", num_ranks));
  }
  if (num_layers * num_physical > kMaxElements) {
    return absl::InvalidArgumentError("placement: more than kMaxElements slots");
  }
  if (num_physical % num_ranks != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "placement: ", num_physical, " physical slots do not divide over ", num_ranks, " ranks"));
  }
  if (num_physical < num_logical) {
    return absl::InvalidArgumentError(absl::StrCat("placement: ", num_physical,
                                                   " physical slots cannot hold ", num_logical,
                                                   " logical experts"));
  }
  return absl::OkStatus();
}

absl::StatusOr<Placement> PlacementFromPhysicalMap(int32_t num_layers, int32_t num_logical,
                                                   int32_t num_ranks,
                                                   std::vector<int32_t> physical_to_logical) {
  if (num_layers < 1) return absl::InvalidArgumentError("placement: num_layers < 1");
  if (physical_to_logical.size() % num_layers != 0) {
    return absl::InvalidArgumentError("placement: map size is not a multiple of num_layers");
  }
  const int64_t num_physical = static_cast<int64_t>(physical_to_logical.size()) / num_layers;
  if (absl::Status s = CheckPlacementShape(num_layers, num_logical, num_physical, num_ranks);
      !s.ok()) {
    return s;
  }
  Placement out;
  out.num_layers = num_layers;
  out.num_logical = num_logical;
  out.num_physical = static_cast<int32_t>(num_physical);
  out.num_ranks = num_ranks;
  out.replica_count.assign(static_cast<size_t>(num_layers) * num_logical, 0);
  for (int32_t l = 0; l < num_layers; ++l) {
    for (int32_t p = 0; p < out.num_physical; ++p) {
      const int32_t e = physical_to_logical[static_cast<size_t>(l) * num_physical + p];
      if (e < 0 || e >= num_logical) {
        return absl::InvalidArgumentError(
            absl::StrCat("placement: layer ", l, " slot ", p, " names logical expert ", e));
      }
      ++out.replica_count[static_cast<size_t>(l) * num_logical + e];
    }
  }
  for (size_t i = 0; i < out.replica_count.size(); ++i) {
    if (out.replica_count[i] == 0) {
      return absl::InvalidArgumentError(absl::StrCat("placement: layer ", i / num_logical,
                                                     " logical expert ", i % num_logical,
                                                     " has no physical slot"));
    }
  }
  out.max_replicas = *std::max_element(out.replica_count.begin(), out.replica_count.end());
  out.logical_to_physical.assign(out.replica_count.size() * out.max_replicas, -1);
  std::vector<int32_t> filled(out.replica_count.size(), 0);
  for (int32_t l = 0; l < num_layers; ++l) {
    for (int32_t p = 0; p < out.num_physical; ++p) {
      const size_t row = static_cast<size_t>(l) * num_logical +
                         physical_to_logical[static_cast<size_t>(l) * num_physical + p];
      out.logical_to_physical[row * out.max_replicas + filled[row]++] = p;
    }
  }
  out.physical_to_logical = std::move(physical_to_logical);
  return out;
}

absl::StatusOr<Placement> TrivialPlacement(int32_t num_layers, int32_t num_logical,
                                           int32_t num_physical, int32_t num_ranks) {
  if (absl::Status s = CheckPlacementShape(num_layers, num_logical, num_physical, num_ranks);
      !s.ok()) {
    return s;
  }
  std::vector<int32_t> map(static_cast<size_t>(num_layers) * num_physical);
  for (size_t i = 0; i < map.size(); ++i)
    map[i] = static_cast<int32_t>(i % num_physical) % num_logical;
  return PlacementFromPhysicalMap(num_layers, num_logical, num_ranks, std::move(map));
}

absl::Status ValidatePlacement(const Placement& placement) {
  const Placement& p = placement;
  if (absl::Status s =
          CheckPlacementShape(p.num_layers, p.num_logical, p.num_physical, p.num_ranks);
      !s.ok()) {
    return s;
  }
  if (p.physical_to_logical.size() != static_cast<size_t>(p.num_layers) * p.num_physical) {
    return absl::InvalidArgumentError("placement: physical_to_logical has the wrong size");
  }
  // Rebuilding from the physical map and comparing checks every invariant at once.
  absl::StatusOr<Placement> rebuilt =
      PlacementFromPhysicalMap(p.num_layers, p.num_logical, p.num_ranks, p.physical_to_logical);
  if (!rebuilt.ok()) return rebuilt.status();
  if (rebuilt->replica_count != p.replica_count) {
    return absl::InvalidArgumentError("placement: replica_count disagrees with the physical map");
  }
  if (rebuilt->max_replicas != p.max_replicas ||
      rebuilt->logical_to_physical != p.logical_to_physical) {
    return absl::InvalidArgumentError(
        "placement: logical_to_physical is not the inverse of physical_to_logical");
  }
  return absl::OkStatus();
}

}  // namespace weir::eplb::policy
