// coordinator/kv_capacity.h
//
// ClusterKvLayout: the KvLayout every rank's scheduler books blocks in, from
// the KV memory the workers reported at LoadWeights — not from flags. The
// coordinator's block manager then hands out only block ids and slots that
// exist on every worker.
//
// Thread safety: pure function.

#ifndef WEIR_COORDINATOR_KV_CAPACITY_H_
#define WEIR_COORDINATOR_KV_CAPACITY_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "coordinator/cluster_state.h"
#include "coordinator/scheduler/kv_layout.h"

namespace weir::coordinator {

// Caps on what the workers reported (tests; 0 = no cap). They can only
// lower the counts: a block the worker does not have is never handed out.
struct KvLayoutCaps {
  int64_t max_blocks = 0;     // --kv_blocks_per_rank
  int32_t max_seq_slots = 0;  // --max_seqs_per_rank
};

// Returns the layout of `workers` [world] (by rank): their common block size
// and compress ratios, and the smallest block and slot counts of any rank
// (every rank books the same layout), lowered by `caps`.
// FAILED_PRECONDITION, naming the rank, when there are no workers, a worker
// reported nothing (no slots), block sizes or compress ratios differ between
// ranks, or a worker's block size is not `block_tokens` (when > 0, the value
// the coordinator asked for); the errors of ValidateKvLayout otherwise.
absl::StatusOr<scheduler::KvLayout> ClusterKvLayout(const std::vector<WorkerKvCapacity>& workers,
                                                    int32_t block_tokens,
                                                    const KvLayoutCaps& caps = {});

}  // namespace weir::coordinator

#endif  // WEIR_COORDINATOR_KV_CAPACITY_H_
