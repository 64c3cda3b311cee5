// coordinator/scheduler/sequence.h
//
// Sequence: the scheduler's state of one request on one rank (tokens so far,
// queue state, what the sent steps will write), and the stop rule applied to
// each new token.
//
// Thread safety: value type; owned by one RankScheduler.

#ifndef WEIR_COORDINATOR_SCHEDULER_SEQUENCE_H_
#define WEIR_COORDINATOR_SCHEDULER_SEQUENCE_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/types/span.h"
#include "coordinator/scheduler/step_plan.h"

namespace weir::coordinator::scheduler {

enum class SeqState { kWaiting, kPrefilling, kRunning };

// Invariants (running sequence of the current epoch):
//   tokens.size() + pending_outputs == num_scheduled + 1
// i.e. every written position produces the next token, known or in flight;
// so the next input token is known iff pending_outputs == 0, and otherwise
// is the output of row `last_row` of step `last_step`. A speculating
// sequence's row writes 1 .. 1 + draft_tokens positions and emits as many
// tokens; num_scheduled counts the worst case until the row's result
// arrives (then the unused part is taken back), so there
//   tokens.size() + pending_outputs <= num_scheduled + 1,
// with equality once nothing is pending.
struct Sequence {
  SeqRequest request;
  // Prompt followed by every generated token the scheduler has received.
  std::vector<uint32_t> tokens;
  // Order of arrival on this rank (larger = later); LCFS compares it.
  int64_t arrival = 0;
  SeqState state = SeqState::kWaiting;
  uint32_t reset_epoch = 0;
  // Unique per (sequence, epoch) within the scheduler; rows of a step refer
  // to the sequence by it, so outputs of a dropped epoch are recognized.
  uint64_t ticket = 0;
  // Positions to prefill in this epoch: the prompt, or prompt + generated
  // after a preemption (recompute).
  int64_t prefill_len = 0;
  // Positions written by steps already planned in this epoch (speculating:
  // at most that many; exact when no output is pending).
  int64_t num_scheduled = 0;
  // Blocks of the allocation already announced to the worker in some row.
  int64_t blocks_sent = 0;
  // Sampling rows planned whose output has not been received yet.
  int32_t pending_outputs = 0;
  // Latest step with a row of this sequence in this epoch, and that row.
  std::optional<uint64_t> last_step;
  int32_t last_row = -1;
  // Waiting samples to fork off this sequence at its last prompt position
  // (SeqRequest::fork_of); cleared when they fork or a new epoch starts.
  std::vector<RequestId> fork_children;

  int64_t num_generated() const {
    return static_cast<int64_t>(tokens.size()) - static_cast<int64_t>(request.prompt.size());
  }
  // Tokens the sequence will have once every planned output is received.
  int64_t committed_len() const { return static_cast<int64_t>(tokens.size()) + pending_outputs; }
};

// Returns why `seq` ends after its newest token tokens.back(), or kNone:
// EOS (an id of `eos_token_ids`, unless ignore_eos) and stop_token_ids count
// once min_new_tokens were generated; then max_new_tokens; then the context
// limit (tokens.size() >= max_model_len).
// REQUIRES: seq.num_generated() >= 1.
FinishReason CheckStop(const Sequence& seq, absl::Span<const uint32_t> eos_token_ids,
                       int64_t max_model_len);

// Returns true if `seq` ends for length once every planned output arrives,
// whatever the tokens are (so planning another row for it is wasted).
bool EndsByLength(const Sequence& seq, int64_t max_model_len);

}  // namespace weir::coordinator::scheduler

#endif  // WEIR_COORDINATOR_SCHEDULER_SEQUENCE_H_
