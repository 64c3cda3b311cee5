// eplb/expert_map.h
//
// Conversions between the wire form of an expert map (weir.v1.ExpertMap) and
// the policy's Placement, and the initial map every worker starts with.
//
// Thread safety: pure functions; safe to call concurrently.

#ifndef WEIR_EPLB_EXPERT_MAP_H_
#define WEIR_EPLB_EXPERT_MAP_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "eplb/policy/placement.h"
#include "proto/common.pb.h"

namespace weir::eplb {

// Returns the wire form of `placement` as map version `version`.
v1::ExpertMap ToExpertMapProto(const policy::Placement& placement, uint64_t version);

// Returns the placement `map` describes (its rank count is num_physical /
// slots_per_rank). INVALID_ARGUMENT if a dimension is zero, num_physical is
// not a multiple of slots_per_rank, physical_to_logical is not
// [num_layers, num_physical], an entry is out of range or a logical expert of
// some layer has no slot.
absl::StatusOr<policy::Placement> FromExpertMapProto(const v1::ExpertMap& map);

// Returns the placement of map version 0, the one workers load: slot p holds
// logical expert p % num_logical, with ceil(num_logical / world_size) slots
// per rank. INVALID_ARGUMENT for a non-positive dimension.
absl::StatusOr<policy::Placement> InitialPlacement(int32_t num_layers, int32_t num_logical,
                                                   int32_t world_size);

}  // namespace weir::eplb

#endif  // WEIR_EPLB_EXPERT_MAP_H_
