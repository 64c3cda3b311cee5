#include "worker/model/expert_placement.h"

#include <memory>

#include "absl/strings/str_cat.h"

namespace weir::model {

absl::Status ValidatePlacement(const ExpertPlacement& p) {
  if (p.num_layers < 1 || p.num_logical < 1 || p.slots_per_rank < 1 || p.world_size < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "expert placement: layers ", p.num_layers, ", logical experts ", p.num_logical,
        ", slots per rank ", p.slots_per_rank, ", ranks ", p.world_size, " must all be >= 1"));
  }
  const size_t want = static_cast<size_t>(p.num_layers) * p.num_physical();
  if (p.physical_to_logical.size() != want) {
    return absl::InvalidArgumentError(absl::StrCat(
        "expert placement: ", p.physical_to_logical.size(), " entries, expected ", want));
  }
  for (int l = 0; l < p.num_layers; ++l) {
    std::vector<bool> present(p.num_logical, false);
    for (int s = 0; s < p.num_physical(); ++s) {
      const int32_t e = p.logical(l, s);
      if (e < 0 || e >= p.num_logical) {
        return absl::InvalidArgumentError(absl::StrCat("expert placement: layer ", l, " slot ", s,
                                                       " holds expert ", e, " of ", p.num_logical));
      }
      present[e] = true;
    }
    for (int e = 0; e < p.num_logical; ++e) {
      if (!present[e]) {
        return absl::InvalidArgumentError(
            absl::StrCat("expert placement: layer ", l, " has no slot for expert ", e));
      }
    }
  }
  return absl::OkStatus();
}

ExpertPlacement IdentityPlacement(int num_layers, int num_logical, int world_size) {
  ExpertPlacement p{.num_layers = num_layers,
                    .num_logical = num_logical,
                    .slots_per_rank = (num_logical + world_size - 1) / world_size,
                    .world_size = world_size};
  for (int l = 0; l < num_layers; ++l) {
    for (int s = 0; s < p.num_physical(); ++s) p.physical_to_logical.push_back(s % num_logical);
  }
  return p;
}

std::vector<std::vector<std::vector<int>>> ReplicaSlots(const ExpertPlacement& p) {
  std::vector<std::vector<std::vector<int>>> slots(p.num_layers,
                                                   std::vector<std::vector<int>>(p.num_logical));
  for (int l = 0; l < p.num_layers; ++l) {
    for (int s = 0; s < p.num_physical(); ++s) slots[l][p.logical(l, s)].push_back(s);
  }
  return slots;
}

ExpertFilter OwnedExpertFilter(const ExpertPlacement& p, int rank) {
  // owned[layer * num_logical + expert]
  auto owned =
      std::make_shared<std::vector<bool>>(static_cast<size_t>(p.num_layers) * p.num_logical, false);
  for (int l = 0; l < p.num_layers; ++l) {
    for (int s = rank * p.slots_per_rank; s < (rank + 1) * p.slots_per_rank; ++s) {
      (*owned)[static_cast<size_t>(l) * p.num_logical + p.logical(l, s)] = true;
    }
  }
  const int layers = p.num_layers, logical = p.num_logical;
  return [owned, layers, logical](int layer, int64_t expert) {
    if (layer < 0 || layer >= layers || expert < 0 || expert >= logical) return true;
    return static_cast<bool>((*owned)[static_cast<size_t>(layer) * logical + expert]);
  };
}

}  // namespace weir::model
