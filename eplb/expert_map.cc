#include "eplb/expert_map.h"

#include <vector>

#include "absl/strings/str_cat.h"

namespace weir::eplb {

v1::ExpertMap ToExpertMapProto(const policy::Placement& placement, uint64_t version) {
  v1::ExpertMap map;
  map.set_version(version);
  map.set_num_layers(static_cast<uint32_t>(placement.num_layers));
  map.set_num_physical(static_cast<uint32_t>(placement.num_physical));
  map.set_num_logical(static_cast<uint32_t>(placement.num_logical));
  map.set_slots_per_rank(static_cast<uint32_t>(placement.slots_per_rank()));
  map.mutable_physical_to_logical()->Add(placement.physical_to_logical.begin(),
                                         placement.physical_to_logical.end());
  return map;
}

absl::StatusOr<policy::Placement> FromExpertMapProto(const v1::ExpertMap& map) {
  if (map.num_layers() == 0 || map.num_logical() == 0 || map.num_physical() == 0 ||
      map.slots_per_rank() == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "expert map ", map.version(), ": layers, logical experts, physical slots and slots per "
        "rank must be positive"));
  }
  if (map.num_physical() % map.slots_per_rank() != 0) {
    return absl::InvalidArgumentError(absl::StrCat("expert map ", map.version(), ": ",
                                                   map.num_physical(), " slots do not split into ",
                                                   map.slots_per_rank(), " per rank"));
  }
  const uint64_t want = uint64_t{map.num_layers()} * map.num_physical();
  if (static_cast<uint64_t>(map.physical_to_logical_size()) != want) {
    return absl::InvalidArgumentError(absl::StrCat(
        "expert map ", map.version(), ": ", map.physical_to_logical_size(),
        " entries do not match [", map.num_layers(), ", ", map.num_physical(), "]"));
  }
  if (absl::Status s = policy::CheckPlacementShape(map.num_layers(), map.num_logical(),
                                                   map.num_physical(),
                                                   map.num_physical() / map.slots_per_rank());
      !s.ok()) {
    return s;
  }
  return policy::PlacementFromPhysicalMap(
      static_cast<int32_t>(map.num_layers()), static_cast<int32_t>(map.num_logical()),
      static_cast<int32_t>(map.num_physical() / map.slots_per_rank()),
      std::vector<int32_t>(map.physical_to_logical().begin(), map.physical_to_logical().end()));
}

absl::StatusOr<policy::Placement> InitialPlacement(int32_t num_layers, int32_t num_logical,
                                                   int32_t world_size) {
  if (num_layers < 1 || num_logical < 1 || world_size < 1) {
    return absl::InvalidArgumentError(absl::StrCat("initial expert map: layers ", num_layers,
                                                   ", logical experts ", num_logical, ", ranks ",
                                                   world_size, " must be positive"));
  }
  const int64_t slots_per_rank = (int64_t{num_logical} + world_size - 1) / world_size;
  const int64_t num_physical = slots_per_rank * world_size;
  if (absl::Status s =
          policy::CheckPlacementShape(num_layers, num_logical, num_physical, world_size);
      !s.ok()) {
    return s;
  }
  return policy::TrivialPlacement(num_layers, num_logical, static_cast<int32_t>(num_physical),
                                  world_size);
}

}  // namespace weir::eplb
