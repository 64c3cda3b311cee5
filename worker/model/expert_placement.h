// worker/model/expert_placement.h
//
// ExpertPlacement: where the routed experts of the backbone's MoE layers live
// when they are spread over ranks (expert parallelism). Each layer has
// num_physical = slots_per_rank * world_size physical slots; slot p lives on
// rank p / slots_per_rank and holds logical expert physical_to_logical[layer,
// p]. A logical expert may have several slots (redundant replicas, placed by
// the load balancer); every logical expert has at least one in every layer.
// It mirrors the ExpertMap message of proto/common.proto.
//
// Replica choice: a (token t, expert e) pair of rank r goes to replica
// (t + r) mod replicas(e) of e's slots in ascending slot order. Deterministic
// (never timing-dependent); results do not depend on it since replicas hold
// identical weights.
//
// Thread safety: immutable value type; functions are pure.

#ifndef WEIR_WORKER_MODEL_EXPERT_PLACEMENT_H_
#define WEIR_WORKER_MODEL_EXPERT_PLACEMENT_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "worker/model/weights.h"

namespace weir::model {

struct ExpertPlacement {
  int num_layers = 0;   // backbone MoE layers (ModelConfig::n_layers)
  int num_logical = 0;  // routed experts per layer (ModelConfig::n_routed_experts)
  int slots_per_rank = 0;
  int world_size = 0;
  std::vector<int32_t> physical_to_logical;  // [num_layers, num_physical]

  int num_physical() const { return slots_per_rank * world_size; }
  int32_t logical(int layer, int slot) const {
    return physical_to_logical[static_cast<size_t>(layer) * num_physical() + slot];
  }
  int owner(int slot) const { return slot / slots_per_rank; }
};

// INVALID_ARGUMENT naming the first problem: non-positive sizes, a table of
// the wrong size, an id outside [0, num_logical), or a logical expert without
// a slot in some layer.
absl::Status ValidatePlacement(const ExpertPlacement& placement);

// Slot p holds logical expert p mod num_logical, slots_per_rank =
// ceil(num_logical / world_size) (the last slots are replicas when the
// experts do not divide evenly). REQUIRES: all arguments >= 1.
ExpertPlacement IdentityPlacement(int num_layers, int num_logical, int world_size);

// Replica slots of every (layer, logical expert), ascending:
// [layers][logical] -> slots. REQUIRES: ValidatePlacement(placement).ok().
std::vector<std::vector<std::vector<int>>> ReplicaSlots(const ExpertPlacement& placement);

// Loads exactly the logical experts with a slot on `rank` (backbone layers
// < num_layers; other layers are not the filter's business: DSpark stages
// always load everything). REQUIRES: valid placement, 0 <= rank < world_size.
ExpertFilter OwnedExpertFilter(const ExpertPlacement& placement, int rank);

}  // namespace weir::model

#endif  // WEIR_WORKER_MODEL_EXPERT_PLACEMENT_H_
