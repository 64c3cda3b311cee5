#include "worker/expert_map_state.h"

#include "absl/strings/str_cat.h"

namespace weir::worker {

std::vector<int32_t> ExpertMap::ExpertsOnRank(int layer, int rank) const {
  const int32_t* row = physical_to_logical.data() + static_cast<size_t>(layer) * num_physical;
  return std::vector<int32_t>(row + rank * slots_per_rank, row + (rank + 1) * slots_per_rank);
}

ExpertMap IdentityExpertMap(int num_layers, int num_logical, int world_size) {
  ExpertMap map;
  map.num_layers = num_layers;
  map.num_logical = num_logical;
  map.slots_per_rank = world_size > 0 ? (num_logical + world_size - 1) / world_size : 0;
  map.num_physical = map.slots_per_rank * world_size;
  for (int l = 0; l < num_layers; ++l) {
    for (int p = 0; p < map.num_physical; ++p) map.physical_to_logical.push_back(p % num_logical);
  }
  return map;
}

absl::Status ValidateExpertMap(const ExpertMap& map, int world_size) {
  if (map.num_layers < 1 || map.num_logical < 1 || map.slots_per_rank < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "expert map: layers, logical experts and slots per rank must be positive, got ",
        map.num_layers, ", ", map.num_logical, ", ", map.slots_per_rank));
  }
  if (static_cast<int64_t>(map.slots_per_rank) * world_size != map.num_physical) {
    return absl::InvalidArgumentError(
        absl::StrCat("expert map: ", map.num_physical, " physical slots != ", map.slots_per_rank,
                     " slots per rank x ", world_size, " ranks"));
  }
  if (map.num_physical < map.num_logical) {
    return absl::InvalidArgumentError(absl::StrCat("expert map: ", map.num_physical,
                                                   " physical slots cannot hold ",
                                                   map.num_logical, " logical experts"));
  }
  if (map.physical_to_logical.size() !=
      static_cast<size_t>(map.num_layers) * static_cast<size_t>(map.num_physical)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "expert map: physical_to_logical has ", map.physical_to_logical.size(),
        " entries, expected [", map.num_layers, ", ", map.num_physical, "]"));
  }
  std::vector<int> replicas(map.num_logical);
  for (int l = 0; l < map.num_layers; ++l) {
    std::fill(replicas.begin(), replicas.end(), 0);
    for (int p = 0; p < map.num_physical; ++p) {
      const int32_t e = map.physical_to_logical[static_cast<size_t>(l) * map.num_physical + p];
      if (e < 0 || e >= map.num_logical) {
        return absl::InvalidArgumentError(absl::StrCat("expert map: layer ", l, " slot ", p,
                                                       " holds expert ", e, " outside [0, ",
                                                       map.num_logical, ")"));
      }
      ++replicas[e];
    }
    for (int e = 0; e < map.num_logical; ++e) {
      if (replicas[e] == 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("expert map: layer ", l, " has no replica of expert ", e));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status ExpertMapState::Prepare(ExpertMap map, int world_size) {
  if (absl::Status valid = ValidateExpertMap(map, world_size); !valid.ok()) return valid;
  if (map.num_layers != committed_.num_layers || map.num_logical != committed_.num_logical ||
      map.num_physical != committed_.num_physical) {
    return absl::InvalidArgumentError(absl::StrCat(
        "expert map: shape [", map.num_layers, ", ", map.num_physical, "] over ",
        map.num_logical, " experts differs from the committed [", committed_.num_layers, ", ",
        committed_.num_physical, "] over ", committed_.num_logical));
  }
  if (map.version <= committed_.version) {
    return absl::AbortedError(absl::StrCat("expert map version ", map.version,
                                           " is not newer than committed ", committed_.version));
  }
  staged_ = std::move(map);
  return absl::OkStatus();
}

absl::Status ExpertMapState::Commit(uint64_t version) {
  if (version == committed_.version) return absl::OkStatus();
  if (!staged_.has_value() || staged_->version != version) {
    return absl::AbortedError(absl::StrCat(
        "expert map version ", version, " was not prepared on this worker (staged: ",
        staged_ ? absl::StrCat(staged_->version) : std::string("none"), ")"));
  }
  committed_ = std::move(*staged_);
  staged_.reset();
  return absl::OkStatus();
}

std::optional<uint64_t> ExpertMapState::staged_version() const {
  if (!staged_) return std::nullopt;
  return staged_->version;
}

absl::StatusOr<ExpertMap> ExpertMapState::staged() const {
  if (!staged_.has_value()) return absl::FailedPreconditionError("no expert map is staged");
  return *staged_;
}

}  // namespace weir::worker
