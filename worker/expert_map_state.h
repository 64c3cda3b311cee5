// worker/expert_map_state.h
//
// ExpertMapState: the versioned expert placement a worker runs with. EPLB
// prepares a new map (the worker stages the experts it will own), the
// coordinator commits it at a step boundary. A commit of a version that was
// not prepared is refused, so a worker that missed a version can never run
// with a placement its peers do not share.
//
// Thread safety: not thread-safe; the worker guards it with its own mutex.

#ifndef WEIR_WORKER_EXPERT_MAP_STATE_H_
#define WEIR_WORKER_EXPERT_MAP_STATE_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace weir::worker {

struct ExpertMap {
  uint64_t version = 0;
  int num_layers = 0;
  int num_physical = 0;
  int num_logical = 0;
  int slots_per_rank = 0;
  // [num_layers, num_physical]: logical expert held by each physical slot.
  std::vector<int32_t> physical_to_logical;

  // Logical experts whose replicas live on `rank` in `layer`, by slot.
  std::vector<int32_t> ExpertsOnRank(int layer, int rank) const;
};

// The initial map (version 0): slot p holds logical expert p % num_logical,
// with ceil(num_logical / world_size) slots per rank; when the experts do
// not split evenly over the ranks, the first ones get a second replica.
ExpertMap IdentityExpertMap(int num_layers, int num_logical, int world_size);

// Checks a map against the world: shapes, ids in range, every logical expert
// with at least one replica in every layer, num_physical == slots_per_rank *
// world_size. INVALID_ARGUMENT naming the first problem.
absl::Status ValidateExpertMap(const ExpertMap& map, int world_size);

class ExpertMapState {
 public:
  // Starts committed to `initial`.
  explicit ExpertMapState(ExpertMap initial) : committed_(std::move(initial)) {}

  // Stages `map`. INVALID_ARGUMENT if it is malformed for `world_size` or has
  // a different shape (layers, logical experts, slots) than the committed
  // map; ABORTED if its version is not newer than the committed one. A newer
  // prepare replaces an older staged map.
  absl::Status Prepare(ExpertMap map, int world_size);

  // Makes the staged map current. OK (no-op) if `version` is already
  // committed; ABORTED if `version` is not the staged version.
  absl::Status Commit(uint64_t version);

  const ExpertMap& committed() const { return committed_; }
  std::optional<uint64_t> staged_version() const;
  // The staged map; FAILED_PRECONDITION if none.
  absl::StatusOr<ExpertMap> staged() const;

 private:
  ExpertMap committed_;
  std::optional<ExpertMap> staged_;
};

}  // namespace weir::worker

#endif  // WEIR_WORKER_EXPERT_MAP_STATE_H_
