// coordinator/scheduler/step_plan.h
//
// Plain structs that cross the scheduler's boundary: the requests it is
// given, the per-rank plan it builds for one step, the per-rank result it is
// fed back, and the token/finish updates it returns. The step driver converts
// RankStepPlan to the StepPlan proto and the StepResult proto to
// RankStepResult; nothing here knows about protobuf.
//
// Thread safety: value types.

#ifndef WEIR_COORDINATOR_SCHEDULER_STEP_PLAN_H_
#define WEIR_COORDINATOR_SCHEDULER_STEP_PLAN_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/strong_id.h"

namespace weir::coordinator::scheduler {

// Every rank of a group runs the same type of step.
enum class StepType { kPrefill, kDecode };

const char* StepTypeName(StepType type);

// One generation request as the scheduler needs it (already validated and
// tokenized by the API layer).
struct SeqRequest {
  RequestId id;
  std::vector<uint32_t> prompt;  // [prompt_len], prompt_len >= 1
  uint32_t max_new_tokens = 16;  // >= 1
  // EOS and stop tokens end the sequence only once this many were generated.
  uint32_t min_new_tokens = 0;
  std::vector<uint32_t> stop_token_ids;
  bool ignore_eos = false;
  // Lower is more urgent (GenerateRequest.priority): the waiting queue is
  // ordered by it (FCFS within one value), decode batches over the limit
  // keep the most urgent, and preemption takes the least urgent first.
  int32_t priority = 0;
  // GenerateRequest.tenant ("" is a tenant too): within a priority, the
  // tenant with the fewest admitted sequences on the rank is admitted first,
  // so a tenant flooding the queue cannot starve the others.
  std::string tenant;
  // Set: another sample of request `fork_of` (same prompt), added after it
  // on the same rank. While that request has not reached its last prompt
  // position in the epoch it was added in, this one waits; then it is
  // admitted in the same step as a fork of it (PlanRow::fork_from: its KV
  // copied on the worker, only the last prompt token forwarded again), so
  // the prompt is prefilled once. If it cannot be then (no KV or room, the
  // other request gone or preempted), it is prefilled on its own.
  std::optional<RequestId> fork_of;
};

// Why a sequence ended; mirrors weir.v1.FinishReason.
enum class FinishReason {
  kNone = 0,
  kEos,           // a model end token (unless ignore_eos)
  kStopToken,     // one of stop_token_ids
  kMaxTokens,     // max_new_tokens generated
  kContextLimit,  // prompt + output reached max_model_len
  kCancelled,     // Cancel()
  kWorkerEnded,   // the worker flagged the row finished (e.g. grammar terminated)
};

const char* FinishReasonName(FinishReason reason);

// One row of a rank's plan: a chunk of consecutive positions of one sequence.
struct PlanRow {
  RequestId request;
  SeqSlot slot;
  // Bumped each time the sequence is preempted and recomputed; every rolling
  // state of the slot (lengths, compressor partial groups, draft and grammar
  // state) belongs to one epoch.
  uint32_t reset_epoch = 0;
  // Position of the first input token of this row.
  int64_t start_pos = 0;
  // [num_tokens] inputs for positions start_pos...; empty iff remap >= 0.
  std::vector<uint32_t> input_tokens;
  // >= 0: the single input token is the output token of row `remap` of the
  // previous step (resolved on the worker; the coordinator does not know it
  // yet). -1: the inputs are in input_tokens.
  int32_t remap = -1;
  // KV blocks newly given to this sequence, in block-table order.
  std::vector<BlockId> new_blocks;
  // True if the row's sampled token is used: a decode row or the last chunk
  // of a prefill. Outputs of other rows are ignored.
  bool samples = false;
  // Set: the row starts its slot as a copy of this slot's sequence before
  // the step runs (SeqRequest::fork_of); start_pos is that sequence's length
  // then and new_blocks are all the blocks the copy and the row need.
  std::optional<SeqSlot> fork_from;
  // >= 0: a speculative row (the sequence speculates). A decode row verifies
  // up to this many of the drafts its previous row made and may emit up to
  // draft_tokens + 1 tokens; its start_pos is then a lower bound and its
  // blocks cover start + 1 + draft_tokens for the worst case. A sampling
  // prefill row carries 0: it only drafts for the next row. -1: plain.
  int32_t draft_tokens = -1;

  int64_t num_tokens() const { return remap >= 0 ? 1 : static_cast<int64_t>(input_tokens.size()); }
};

// The plan of one rank for one step.
struct RankStepPlan {
  uint64_t step_id = 0;
  StepType type = StepType::kDecode;
  std::vector<PlanRow> rows;
  // Slots whose state the worker drops before running any row of this step.
  std::vector<SeqSlot> release_slots;
};

// The output of one row of a step.
struct RowOutput {
  // Sampled tokens; the scheduler uses the first one of a plain sampling
  // row, and every one of a speculative row (its accepted drafts, then its
  // own sample: 1 .. draft_tokens + 1).
  std::vector<uint32_t> tokens;
  // The worker ended this sequence (e.g. its grammar terminated).
  bool finished = false;
  // A speculative row: the drafts the worker verified (0 .. draft_tokens;
  // fewer than draft_tokens when it had fewer, or chose fewer from their
  // confidence).
  int32_t verified_drafts = 0;
  // A speculative row that verified nothing because the worker had paused
  // its slot's drafting (RowResult.drafts_paused).
  bool drafts_paused = false;
  // Its verified drafts came from prompt lookup (RowResult.lookup_drafts).
  bool lookup_drafts = false;
};

// The result of one rank for one step: one RowOutput per plan row, in order.
struct RankStepResult {
  uint64_t step_id = 0;
  std::vector<RowOutput> rows;
};

// What a result changed for one request: tokens to stream, and the end.
struct SeqUpdate {
  RequestId request;
  std::vector<uint32_t> new_tokens;
  FinishReason finish = FinishReason::kNone;
  // How many of new_tokens are accepted DSpark drafts.
  int32_t accepted_drafts = 0;
  // How many drafts the row's verification rejected (verified drafts past
  // the accepted ones; counted whether or not a stop cut the row short).
  int32_t rejected_drafts = 0;
};

// What the step-type vote and the router need from a rank.
struct RankLoad {
  // A prefill step would have rows: a prefill in progress, or an admissible
  // request at the head of the waiting queue.
  bool has_prefill_work = false;
  // Some admitted sequence is decoding.
  bool has_decode_work = false;
  int64_t num_waiting = 0;
  // Blocks the waiting queue's prefills will take when admitted.
  int64_t num_waiting_blocks = 0;
  int64_t num_prefilling = 0;
  int64_t num_running = 0;
  // The rank's KV books (BlockManager): used blocks include those whose
  // release waits for an in-flight step (num_pending_release_blocks).
  int64_t num_free_blocks = 0;
  int64_t num_used_blocks = 0;
  int64_t num_blocks = 0;
  int64_t num_pending_release_blocks = 0;
  int32_t block_tokens = 0;
  int64_t num_free_slots = 0;
  int64_t num_seq_slots = 0;
};

}  // namespace weir::coordinator::scheduler

#endif  // WEIR_COORDINATOR_SCHEDULER_STEP_PLAN_H_
