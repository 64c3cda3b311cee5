// coordinator/scheduler/fake_worker.h
//
// Test-only stand-ins for the worker side of a step: FakeModel, a
// deterministic next-token function of the whole token history, and
// FakeWorker, which executes RankStepPlans against a mirror of the slots and
// block tables it was told about and rejects any plan a real worker could
// not run correctly.
//
// Thread safety: not thread-safe.

#ifndef WEIR_COORDINATOR_SCHEDULER_FAKE_WORKER_H_
#define WEIR_COORDINATOR_SCHEDULER_FAKE_WORKER_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "coordinator/scheduler/kv_layout.h"
#include "coordinator/scheduler/step_plan.h"

namespace weir::coordinator::scheduler {

// Next token = Mix(history hash, position) % vocab: any wrong, missing or
// reordered input token changes every later output.
struct FakeModel {
  uint32_t vocab = 64;
  static uint64_t Absorb(uint64_t hash, uint32_t token);
  uint32_t Next(uint64_t hash, int64_t pos) const;
};

// Returns the reference output of `request` generated one token at a time
// with no scheduler, and its finish reason (EOS, stop token, max tokens or
// context limit, in that order of checks).
std::vector<uint32_t> ReferenceOutput(const FakeModel& model, const SeqRequest& request,
                                      absl::Span<const uint32_t> eos_token_ids,
                                      int64_t max_model_len, FinishReason* reason);

class FakeWorker {
 public:
  FakeWorker(const KvLayout& layout, FakeModel model) : layout_(layout), model_(model) {}

  // Executes `plan` and returns one output token per row (0 for rows that
  // do not sample). INTERNAL if the plan breaks a worker rule: step ids not
  // consecutive; a slot reused by a new sequence or epoch without release; a
  // row not starting where its slot's written positions end; a remap that is
  // not a sampling row of the previous step; a block given while another
  // slot still holds it; written positions not covered by the slot's blocks.
  // A speculative row (PlanRow::draft_tokens k) accepts a pseudo-random 0..k
  // of its drafts, which are the model's next tokens: it emits 1..k+1 tokens
  // and writes as many positions (its blocks must cover k more).
  absl::StatusOr<RankStepResult> Execute(const RankStepPlan& plan);

  int64_t rows_executed() const { return rows_executed_; }
  // Block -> the slot holding it, as the plans so far assigned them.
  const absl::flat_hash_map<int32_t, int32_t>& block_owners() const { return block_owner_; }

 private:
  struct Slot {
    RequestId request;
    uint32_t epoch = 0;
    int64_t written = 0;
    uint64_t hash = 0;
    std::vector<BlockId> blocks;
  };

  KvLayout layout_;
  FakeModel model_;
  absl::flat_hash_map<int32_t, Slot> slots_;
  absl::flat_hash_map<int32_t, int32_t> block_owner_;  // block -> slot
  std::optional<uint64_t> last_step_;
  std::vector<uint32_t> prev_outputs_;
  std::vector<bool> prev_samples_;
  int64_t rows_executed_ = 0;
};

}  // namespace weir::coordinator::scheduler

#endif  // WEIR_COORDINATOR_SCHEDULER_FAKE_WORKER_H_
