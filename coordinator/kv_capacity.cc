#include "coordinator/kv_capacity.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace weir::coordinator {

absl::StatusOr<scheduler::KvLayout> ClusterKvLayout(const std::vector<WorkerKvCapacity>& workers,
                                                    int32_t block_tokens,
                                                    const KvLayoutCaps& caps) {
  if (workers.empty()) return absl::FailedPreconditionError("no worker reported its KV memory");
  const WorkerKvCapacity& first = workers[0];
  scheduler::KvLayout layout;
  layout.block_tokens = first.block_tokens;
  layout.compress_ratios = first.compress_ratios;
  int64_t blocks = std::numeric_limits<int32_t>::max();
  int64_t slots = std::numeric_limits<int32_t>::max();
  for (size_t r = 0; r < workers.size(); ++r) {
    const WorkerKvCapacity& w = workers[r];
    if (w.num_seq_slots < 1) {
      return absl::FailedPreconditionError(
          absl::StrCat("worker rank ", r, " reported no KV memory (no sequence slots)"));
    }
    if (block_tokens > 0 && w.block_tokens != block_tokens) {
      return absl::FailedPreconditionError(absl::StrCat("worker rank ", r, " has KV blocks of ",
                                                        w.block_tokens, " positions, not the ",
                                                        block_tokens, " asked for"));
    }
    if (w.block_tokens != first.block_tokens || w.compress_ratios != first.compress_ratios) {
      return absl::FailedPreconditionError(absl::StrCat(
          "worker rank ", r, " has KV blocks of ", w.block_tokens, " positions with ratios [",
          absl::StrJoin(w.compress_ratios, ","), "]; rank 0 has ", first.block_tokens, " with [",
          absl::StrJoin(first.compress_ratios, ","), "]"));
    }
    blocks = std::min(blocks, w.num_blocks);
    slots = std::min<int64_t>(slots, w.num_seq_slots);
  }
  if (caps.max_blocks > 0) blocks = std::min(blocks, caps.max_blocks);
  if (caps.max_seq_slots > 0) slots = std::min<int64_t>(slots, caps.max_seq_slots);
  layout.num_blocks = static_cast<int32_t>(blocks);
  layout.num_seq_slots = static_cast<int32_t>(slots);
  if (absl::Status s = scheduler::ValidateKvLayout(layout); !s.ok()) return s;
  return layout;
}

}  // namespace weir::coordinator
