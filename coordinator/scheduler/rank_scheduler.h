// coordinator/scheduler/rank_scheduler.h
//
// RankScheduler: the queues and KV books of one DP rank. It admits requests
// in priority order (SeqRequest::priority, lower first), within a priority the
// tenant with the fewest admitted sequences first (fair share; FCFS among
// equals; max_running_per_tenant caps a tenant),
// plans one step at a time (chunked prefill under a token budget, or a decode
// batch), preempts by recompute when blocks run out (the least urgent
// admitted sequence; among equals the one with the shortest output so far,
// the latest arrival on ties), and applies step
// results (tokens, stop conditions). It works the same whether plan t+1 is
// built before or after result t arrives (zero-overhead or plain stepping);
// see README.md "Zero-overhead stepping" for the exact rules.
//
// Thread safety: not thread-safe; one owner (the step-loop thread).

#ifndef WEIR_COORDINATOR_SCHEDULER_RANK_SCHEDULER_H_
#define WEIR_COORDINATOR_SCHEDULER_RANK_SCHEDULER_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/container/node_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "coordinator/scheduler/block_manager.h"
#include "coordinator/scheduler/sequence.h"
#include "coordinator/scheduler/step_plan.h"

namespace weir::coordinator::scheduler {

struct RankSchedulerConfig {
  KvLayout kv;
  // Longest sequence (prompt + output) in tokens.
  int64_t max_model_len = 4096;
  // Per-step token budget of a prefill step (sum of chunk lengths).
  int64_t max_prefill_tokens = 2048;
  // Most rows in a decode step; over it, the latest arrivals are chosen (LCFS).
  int32_t max_decode_batch = 64;
  // Most sequences admitted (prefilling + running) at once; 0 = max_decode_batch.
  int32_t max_running = 0;
  // Model end tokens (EOS).
  std::vector<uint32_t> eos_token_ids;
  // Most sequences of one tenant admitted (prefilling + running) at once on
  // the rank; 0 = no limit. A tenant at its limit waits while others are
  // admitted.
  int32_t max_running_per_tenant = 0;
  // Speculative decoding (--speculative=dspark): every decode row of a
  // sequence verifies up to this many DSpark drafts and emits 1 ..
  // num_draft_tokens + 1 tokens (README.md "Speculative decoding"). 0 = off.
  int32_t num_draft_tokens = 0;
};

// Usage (plain stepping; zero-overhead builds plan s+1 before OnResult(s)):
//   ASSIGN_OR_RETURN(auto sched, RankScheduler::Create(config));
//   RETURN_IF_ERROR(sched->Add(std::move(request)));
//   ASSIGN_OR_RETURN(RankStepPlan plan, sched->BuildPlan(step, type));
//   ...send, receive RankStepResult result...
//   ASSIGN_OR_RETURN(std::vector<SeqUpdate> updates, sched->OnResult(result));
class RankScheduler {
 public:
  // INVALID_ARGUMENT for a bad layout or a non-positive limit.
  static absl::StatusOr<std::unique_ptr<RankScheduler>> Create(const RankSchedulerConfig& config);

  // Queues `request` behind every waiting request of its priority or a more
  // urgent one (FCFS within a priority). INVALID_ARGUMENT for an empty prompt,
  // max_new_tokens == 0, a prompt of max_model_len tokens or more, or a
  // request whose longest possible sequence needs more blocks than the pool
  // has (it could never run); ALREADY_EXISTS if its id is live here.
  absl::Status Add(SeqRequest request);

  // Drops `id` wherever it is; its KV is released after the last planned
  // step that uses it has returned, and its slot is listed in the next plan's
  // release_slots. Outputs still in flight for it are discarded.
  // NOT_FOUND if `id` is not live here (never added, finished or cancelled).
  absl::Status Cancel(RequestId id);

  // Returns the rank's load for the step-type vote and the router.
  RankLoad Load() const;

  // Plans step `step_id` of type `type`. Releases first (see
  // RankStepPlan::release_slots), then rows: for kPrefill, prefill chunks
  // of admitted sequences in admission order, then newly admitted ones from
  // the waiting queue (head first, never skipping the head), until the token
  // budget is spent; for kDecode, one row per selected running sequence.
  // An empty plan is valid (the rank still takes part in the step).
  // FAILED_PRECONDITION if `step_id` is not one more than the previous
  // plan's, or if two planned steps have not returned yet (the scheduler
  // plans at most one step ahead of the results).
  absl::StatusOr<RankStepPlan> BuildPlan(uint64_t step_id, StepType type);

  // Applies the result of the oldest unreturned step: appends sampled
  // tokens, checks stop conditions, finishes sequences, then completes the
  // deferred releases due at this step. Returns one update per request that
  // got a token or finished, in row order. Outputs of rows whose sequence
  // finished, was cancelled or preempted since the plan are discarded.
  // FAILED_PRECONDITION if `result.step_id` is not the oldest unreturned
  // step; INVALID_ARGUMENT if the row count differs from the plan's or a used
  // sampling row has no token. On error nothing changes.
  absl::StatusOr<std::vector<SeqUpdate>> OnResult(const RankStepResult& result);

  // After the rank's worker was replaced by a fresh one that holds nothing:
  // every live sequence goes back to the waiting queue as after a preemption
  // (its prompt and the tokens received so far are prefilled again, nothing
  // already delivered is produced twice), admitted sequences first in arrival
  // order, then the waiting queue; the steps in flight are forgotten (their
  // outputs never arrive), the KV books start empty, nothing is left to
  // release, and the next plan may have any step id.
  void ResetAfterWorkerLoss();
  // The KV books (read-only), for accounting checks and server state.
  const BlockManager& blocks() const { return blocks_; }
  // Slots released since the last plan: the next plan lists them in
  // release_slots. Until then their worker still holds their blocks, even
  // when the books already count those blocks free (their last step
  // returned): no plan can hand them out before the one that releases them.
  const std::vector<SeqSlot>& slots_to_release() const { return release_next_; }
  // Sequences preempted (recompute) since creation.
  int64_t num_preemptions() const { return num_preemptions_; }
  // Samples admitted as forks of another's prefill (SeqRequest::fork_of).
  int64_t num_forks() const { return num_forks_; }
  // True if `id` is waiting to fork off a live sequence that was admitted
  // (its prefill runs; the fork comes with its last prompt token).
  bool WaitsForAdmittedSource(RequestId id) const;
  // Speculative decoding: decode rows that verified at least one draft, by
  // the drafts they accepted ([num_draft_tokens + 1]: index = accepted;
  // empty when off), counted when their result arrives for a live
  // sequence, before stop conditions drop anything; and the drafts the
  // worker verified in those rows (RowOutput::verified_drafts), in all (mean
  // verify length = verified_drafts / rows).
  const std::vector<int64_t>& accepted_histogram() const { return accepted_histogram_; }
  int64_t verified_drafts() const { return verified_drafts_; }
  // Decode rows of a speculative slot whose drafting the worker had paused
  // (RowOutput::drafts_paused), counted instead of in accepted_histogram.
  int64_t paused_steps() const { return paused_steps_; }
  // Of the verifications in accepted_histogram, those whose drafts came from
  // prompt lookup (RowOutput::lookup_drafts), and the drafts they accepted.
  int64_t lookup_verifications() const { return lookup_verifications_; }
  int64_t lookup_accepted() const { return lookup_accepted_; }
  // Live sequences (waiting, prefilling or running).
  int64_t num_live() const { return static_cast<int64_t>(seqs_.size()); }

 private:
  struct RowRef {
    RequestId request;
    uint64_t ticket = 0;
    bool samples = false;
    // PlanRow::draft_tokens of the row.
    int32_t draft_tokens = -1;
  };
  struct InFlightStep {
    uint64_t step_id = 0;
    std::vector<RowRef> rows;
  };

  RankScheduler(const RankSchedulerConfig& config, BlockManager blocks);

  void SchedulePrefill(RankStepPlan& plan);
  void ScheduleDecode(RankStepPlan& plan);
  // Appends a prefill row of up to `budget` tokens (stopping before the last
  // prompt token while samples wait to fork, see SeqRequest::fork_of), and
  // after a row that ends the prefill the forks it can admit; returns the
  // tokens planned.
  int64_t AddPrefillChunk(Sequence& seq, int64_t budget, RankStepPlan& plan);
  // Admits the waiting forks of `parent`, whose final prefill row was just
  // added to `plan`, as fork rows; returns how many.
  int64_t AddForks(Sequence& parent, RankStepPlan& plan);
  // True if `seq` (waiting) waits to fork off a live sequence.
  bool HeldForFork(const Sequence& seq) const;
  // Sequences of `tenant` admitted (prefilling + running).
  int32_t AdmittedOf(const std::string& tenant) const;
  void AddDecodeRow(Sequence& seq, RankStepPlan& plan);
  // True if `seq`'s rows speculate: every sequence's does when the rank
  // speculates (structured output and logprobs included).
  bool Speculates(const Sequence& /*seq*/) const { return config_.num_draft_tokens > 0; }
  // Positions the next decode row of `seq` may write (1, or 1 + its drafts
  // for a speculating sequence); 0 while a speculating sequence must wait
  // for its in-flight row (its worst case would pass the sequence's end).
  int64_t DecodeWidth(const Sequence& seq) const;
  // Appends to `row` the blocks of `seq` not yet announced.
  void AnnounceBlocks(Sequence& seq, PlanRow& row);
  // True if `seq` (waiting) may be admitted now: a slot, and blocks for its
  // prefill beyond those reserved for starved running sequences.
  bool CanAdmit(const Sequence& seq) const;
  // The waiting sequence to admit next (waiting_.end() if none may be): in
  // the most urgent priority that has one, the first in queue order whose
  // tenant has the fewest admitted sequences, skipping tenants at
  // max_running_per_tenant. It is never skipped for lack of blocks.
  std::deque<RequestId>::const_iterator NextToAdmit() const;
  // Releases the KV and slot of `seq` (deferred past its last planned step).
  void ReleaseKv(Sequence& seq);
  // Puts `seq` (holding no KV, on no list) in the waiting state of a new
  // epoch that prefills everything it has (prompt and tokens received); the
  // caller queues it.
  void StartNewEpoch(Sequence& seq);
  // Drops KV and requeues `seq` at the head of its priority in the waiting
  // queue, new epoch.
  void Preempt(Sequence& seq);
  // Puts `id` (waiting) in the waiting queue by priority: before every
  // waiting sequence of the same priority (`front`) or after them.
  void Enqueue(RequestId id, bool front);
  // Removes `id` from the prefilling or running list it is in.
  void Unlist(RequestId id, SeqState state);

  RankSchedulerConfig config_;
  BlockManager blocks_;
  absl::node_hash_map<RequestId, Sequence> seqs_;
  std::deque<RequestId> waiting_;       // head = next to admit; by priority
  std::vector<RequestId> prefilling_;   // admission order
  std::vector<RequestId> running_;      // order of prefill completion
  std::deque<InFlightStep> in_flight_;  // planned, result not applied yet
  std::vector<SeqSlot> release_next_;   // slots for the next plan
  std::optional<uint64_t> last_planned_step_;
  // Blocks running sequences lacked in the last decode plan while blocks of
  // an in-flight step were about to return; admission leaves them free, so
  // a re-admitted victim cannot take them back (zero-overhead livelock).
  std::vector<std::pair<RequestId, int64_t>> starved_;  // (sequence, shortfall)
  int64_t waiting_blocks_ = 0;  // sum of BlocksForTokens(prefill_len) over waiting_
  int64_t next_arrival_ = 0;
  uint64_t next_ticket_ = 1;
  int64_t num_preemptions_ = 0;
  int64_t num_forks_ = 0;
  std::vector<int64_t> accepted_histogram_;
  int64_t verified_drafts_ = 0;
  int64_t paused_steps_ = 0;
  int64_t lookup_verifications_ = 0;
  int64_t lookup_accepted_ = 0;
};

}  // namespace weir::coordinator::scheduler

#endif  // WEIR_COORDINATOR_SCHEDULER_RANK_SCHEDULER_H_
