// coordinator/step_driver.h
//
// StepDriver is the coordinator's step loop for one group of DP ranks (one
// worker each). On its own thread it routes new requests to ranks, votes the
// step type, has every RankScheduler build its plan, sends plan t to every
// worker over the worker's Steps stream, and applies results — with
// zero-overhead scheduling (default) plan t+1 is sent before result t is
// read, and rows that need step t's token take it on the worker via remap.
// Each request's tokens and finish reach its sink. A request's constraint
// goes with every row that (re)starts its slot; a worker's `finished` flag
// (the grammar terminated) ends the sequence with kWorkerEnded.
//
// Thread safety: Submit, Cancel and Stop are thread-safe. Sinks run on the
// driver thread and must not block (push to a queue).

#ifndef WEIR_COORDINATOR_STEP_DRIVER_H_
#define WEIR_COORDINATOR_STEP_DRIVER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "coordinator/scheduler/rank_scheduler.h"
#include "coordinator/scheduler/router.h"
#include "coordinator/scheduler/step_type_policy.h"
#include "proto/worker.grpc.pb.h"

namespace weir::coordinator {

struct StepDriverOptions {
  scheduler::RankSchedulerConfig rank;
  scheduler::StepTypePolicyConfig policy;
  bool zero_overhead = true;
  uint64_t epoch = 0;
  // Returns the group epoch of the worker group the streams go to (read when
  // they open: at start and after each recovery); every StepPlan carries it.
  // Null: 0 (workers initialised without group epochs).
  std::function<uint64_t()> group_epoch;
  // Admission limits over requests not yet finished (queued or running):
  // beyond either, Submit answers RESOURCE_EXHAUSTED at once.
  int64_t max_requests = 4096;
  int64_t max_prompt_tokens = int64_t{1} << 22;
  // Expert-load statistics for the EPLB service (empty address = no EPLB):
  // every `stat_interval` steps the plans ask each worker to take its load
  // (StepPlan.return_expert_load), which the worker streams to EPLB itself.
  std::string eplb_address;
  int stat_interval = 128;
  // Debug mode (`--kv_check_every_step`): after every step's plans are built
  // and after every result is applied (releases), check each rank's KV books
  // (BlockManager::VerifyAccounting) and the driver's mirror of what each
  // worker holds (from the plans sent: no block given to a slot while another
  // slot holds it; every block a worker holds is in use in the books or its
  // slot's release is queued). A failure is logged and stops the step loop
  // with INTERNAL naming it. Off: no mirror, no cost but one branch per step.
  bool kv_check_every_step = false;
  // Speculative decoding: --speculative ("dspark" or "ngram") and
  // --verify_length ("fixed" or "confidence"), only reported (speculation());
  // the workers apply them.
  std::string speculative = "dspark";
  std::string verify_length = "fixed";
  // The clock max_queue_time is measured on (tests inject a fake one).
  std::function<absl::Time()> clock = [] { return absl::Now(); };
  // A worker that leaves the driver waiting this long for one step (its
  // result, or room to send its plan) is failed: the loop stops with
  // DEADLINE_EXCEEDED naming the rank and step, every live request gets that
  // error, and Stop never hangs on it. The deadline in force is the larger of
  // this and 20x the slowest of the last 64 steps (so a slow backend's long
  // prefill does not trip it). Zero or infinite: no deadline. Measured on
  // the real clock (a watchdog thread), not on `clock`.
  absl::Duration step_timeout = absl::Seconds(60);
  // Recovery from a lost worker (the coordinator sets it for a cluster it
  // launched). Called on the loop thread when a step fails because of a
  // worker — its stream closed, a step-level error, the step deadline — after
  // the old streams are cancelled; it must replace every worker of the group
  // with a fresh one (holding no sequence) and return their Steps addresses
  // in rank order. Meanwhile live requests wait (new ones queue); then every
  // one is prefilled again from its prompt and the tokens already delivered
  // (RankScheduler::ResetAfterWorkerLoss) and goes on, so its stream sees no
  // gap and no duplicate. An error from it, more than `max_recoveries` within
  // `recovery_window`, or no callback: every live request fails as before.
  std::function<absl::StatusOr<std::vector<std::string>>(const absl::Status& cause)> recover;
  // Attempts at one recovery: when `recover` fails (e.g. a replacement worker
  // gave up on the coordinator while a loaded machine brought the group up
  // slowly), it is called again, up to this many calls in all, each later
  // call counting as a recovery against `max_recoveries`; a cancelled call
  // (the coordinator stopping) is not repeated. The coordinator's local
  // workers take 3 (main.cc); its remote ones 1 (their recovery already waits
  // --rejoin_timeout_s for a lost rank, and a second call would not know
  // which rank it waited for).
  int recover_attempts = 1;
  int max_recoveries = 3;
  absl::Duration recovery_window = absl::Minutes(10);
  // Called once, on the loop thread, when the loop stops for good because of
  // a failure (not for Stop): e.g. to report NOT_SERVING. Must not block.
  std::function<void(const absl::Status& cause)> on_failure;
};

// What a request's sink receives: new tokens (possibly none), and once, a
// finish reason or an error.
struct SeqEvent {
  std::vector<uint32_t> tokens;
  // SeqSubmission::top_logprobs: one entry per token of `tokens`.
  std::vector<v1::TokenLogprobs> logprobs;
  // SeqSubmission::prompt_logprobs: once, before the first token's event
  // (an event of its own), the entries of prompt positions 1.. in order.
  std::vector<v1::TokenLogprobs> prompt_logprobs;
  scheduler::FinishReason finish = scheduler::FinishReason::kNone;
  // The first this many of `tokens` are accepted DSpark drafts.
  int32_t accepted_drafts = 0;
  // Drafts the step's verification rejected (SeqUpdate::rejected_drafts).
  int32_t rejected_drafts = 0;
  // Not OK when the request failed (worker error, NaN logits, lost worker).
  absl::Status error;
  bool done() const { return finish != scheduler::FinishReason::kNone || !error.ok(); }
};

struct SeqSubmission {
  scheduler::SeqRequest request;
  v1::SamplingParams sampling;
  uint64_t seed = 0;
  // Structured output (no kind set: none). Sent with every row that starts
  // the sequence's slot, with constrained_from = the original prompt length.
  v1::StructuredOutput constraint;
  // The request can produce no token (its constraint admits only the empty
  // string): Submit does not queue it; its sink gets one event, kWorkerEnded
  // with no tokens, at once on the caller's thread.
  bool no_tokens = false;
  // GenerateRequest.max_queue_time: if the request has not been admitted on
  // its rank (no row planned for it yet) this long after Submit, it leaves
  // the queue and its sink gets RESOURCE_EXHAUSTED with ErrorInfo.reason
  // QUEUE_TIMEOUT (api.md 2.2). Once admitted it never times out, even if
  // later preempted back to the queue. Unset: waits as long as it takes.
  std::optional<absl::Duration> max_queue_time;
  // > 0: every token's logprob, rank and this many alternatives
  // (SeqEvent::logprobs; StepRow.logprobs on its sampling rows).
  uint32_t top_logprobs = 0;
  // Set: every prompt token's (but the first's) logprob, rank and this many
  // alternatives (SeqEvent::prompt_logprobs; StepRow.prompt_logprobs on its
  // prefill rows until every position arrived, recomputes included).
  std::optional<uint32_t> prompt_logprobs;
  // Runs on the driver thread for every event of the request (see no_tokens).
  std::function<void(const SeqEvent&)> sink;
};

class StepDriver {
 public:
  // Opens a Steps stream to each worker (rank r at worker_addresses[r]) and
  // starts the loop. INVALID_ARGUMENT for bad scheduler/policy configs.
  static absl::StatusOr<std::unique_ptr<StepDriver>> Create(
      const std::vector<std::string>& worker_addresses, StepDriverOptions options);
  ~StepDriver();

  // Queues a request. ALREADY_EXISTS for a live id; UNAVAILABLE once the
  // driver failed or stopped; RESOURCE_EXHAUSTED beyond the admission limits
  // (requests or prompt tokens in flight); INVALID_ARGUMENT from the
  // scheduler's checks arrives through the sink (as the first event's error),
  // and so does a queue timeout (SeqSubmission::max_queue_time).
  absl::Status Submit(SeqSubmission submission);
  // Queues the samples of one request together, all or none (the same checks
  // over the whole group): the loop takes them from the inbox in one step, so
  // samples 1.. fork sample 0's prefill instead of each prefilling alone when
  // the loop happened to plan sample 0 before the others arrived.
  // REQUIRES: `no_tokens` is the same for every submission of the group.
  absl::Status SubmitGroup(std::vector<SeqSubmission> group);

  // Cancels a live request: it finishes with kCancelled (its sink is told)
  // and its KV is freed after the last step that used it returned.
  // NOT_FOUND if the id is not live.
  absl::Status Cancel(RequestId id);

  // Graceful stop, first half: from now on Submit answers UNAVAILABLE
  // ("server is draining"); requests already submitted run on. Waits until
  // none is left, the loop fails or Stop is called, or `timeout` passes;
  // returns how many are left (Stop then fails them).
  int64_t Drain(absl::Duration timeout);

  // Fails every live request with UNAVAILABLE ("server is stopping") and
  // stops the loop. The workers' streams are cancelled before the loop is
  // joined, so a worker that stopped answering cannot make it hang.
  void Stop();

  // Switches every worker to the prepared expert map `version` at the next
  // step boundary: the next step's plans carry it (an idle loop runs an
  // empty step for it). `done` runs once, on the driver thread or the
  // caller's: OK after every worker ran that step (on the new map); the step's
  // error if it failed; UNAVAILABLE if the driver stops first. Returns
  // FAILED_PRECONDITION (and never calls `done`) while another commit is
  // pending, UNAVAILABLE once the driver failed or stopped.
  absl::Status CommitExpertMap(uint64_t version, std::function<void(absl::Status)> done);

  // What the admission limits count: requests submitted and not finished
  // (queued or running) and their prompt tokens, next to the limits
  // (StepDriverOptions::max_requests / max_prompt_tokens). For GetServerState.
  struct AdmissionLoad {
    int64_t requests = 0;
    int64_t prompt_tokens = 0;
    int64_t limit_requests = 0;
    int64_t limit_prompt_tokens = 0;
  };
  AdmissionLoad Admission() const;

  // Scheduler loads per rank (for GetServerState).
  std::vector<scheduler::RankLoad> Loads() const;
  int64_t steps() const;
  // Preemptions over all ranks since start.
  int64_t preemptions() const;
  // Samples admitted as forks of another sample's prefill since start.
  int64_t forks() const;
  // KV accounting checks passed (0 unless kv_check_every_step).
  int64_t kv_checks() const;
  // Speculative decoding over every rank since start
  // (RankScheduler::accepted_histogram, verified_drafts); empty when off.
  // verified_drafts counts what the workers verified
  // (RowResult.verified_drafts); method and verify_length are the options'.
  struct SpeculationStats {
    std::vector<int64_t> accepted_histogram;
    int64_t verified_drafts = 0;
    int64_t paused_steps = 0;  // RankScheduler::paused_steps
    int64_t lookup_verifications = 0;  // RankScheduler::lookup_verifications
    int64_t lookup_accepted = 0;       // RankScheduler::lookup_accepted
    std::string method;                // the options' speculative
    std::string verify_length;
  };
  SpeculationStats speculation() const;
  // Why the loop stopped for good (OK while it runs, or after a plain Stop).
  absl::Status failure() const;

  // Asks the loop to replace the worker group now (through
  // StepDriverOptions::recover), e.g. when the liveness monitor saw a worker
  // die while no step was running (an idle loop would not notice). Ignored
  // without a recover callback or once stopping/failed; requests made before
  // a recovery finishes are dropped by it.
  void RequestRecovery(const absl::Status& cause);

  // Recoveries from lost workers since start, the cause of the last one and
  // how long it took (worker replacement to the loop running again), and
  // from its detection (the first RequestRecovery or the failed step,
  // whichever came first) to the loop running again.
  struct RecoveryStats {
    int64_t recoveries = 0;
    std::string last_cause;
    absl::Duration last_duration;
    absl::Duration last_detect_to_serving;
  };
  RecoveryStats Recoveries() const;

 private:
  struct Worker {
    std::unique_ptr<v1::Worker::Stub> stub;
    std::unique_ptr<grpc::ClientContext> context;
    std::unique_ptr<grpc::ClientReaderWriter<v1::StepPlan, v1::StepResult>> stream;
  };
  struct Live {
    int rank = 0;
    v1::SamplingParams sampling;
    uint64_t seed = 0;
    v1::StructuredOutput constraint;
    uint32_t prompt_len = 0;
    uint32_t top_logprobs = 0;
    std::optional<uint32_t> prompt_logprobs;
    // Prompt logprobs received so far (positions 1 .. next_prompt_pos - 1),
    // sent to the sink once every position is in.
    std::vector<v1::TokenLogprobs> prompt_entries;
    uint32_t next_prompt_pos = 1;
    bool prompt_logprobs_sent = false;
    std::function<void(const SeqEvent&)> sink;
    // Until admitted (a row planned): when it leaves the queue with
    // QUEUE_TIMEOUT. InfiniteFuture = no max_queue_time, or admitted.
    absl::Time queue_deadline = absl::InfiniteFuture();
  };

  StepDriver(StepDriverOptions options, scheduler::StepTypePolicy policy);
  void Loop();
  // One iteration; false when the loop must stop.
  bool Iterate();
  absl::Status SendPlans(const std::vector<scheduler::RankStepPlan>& plans,
                         uint64_t commit_version);
  // Resolves the pending expert-map commit (if any) with `status`.
  void ResolveCommit(const absl::Status& status);
  absl::Status ReadAndApply();
  // Collects the prompt logprobs of `row` (of request `id`, if live and
  // asking) and sends them to its sink once every position is in.
  void TakePromptLogprobs(RequestId id, const v1::RowResult& row);
  // kv_check_every_step: records `plans` in the worker mirrors (releases,
  // then each row's new blocks) and checks every rank (CheckKv).
  absl::Status MirrorAndCheckPlans(const std::vector<scheduler::RankStepPlan>& plans);
  // kv_check_every_step: VerifyAccounting of every rank's books and its
  // worker mirror against them; INTERNAL naming the rank, step and mismatch.
  absl::Status CheckKv(const char* when);
  // Fails every live request still waiting for admission past its
  // queue_deadline (it holds no KV: only its queue entry is dropped).
  void ExpireQueued();
  void Finish(RequestId id, const SeqEvent& event);
  void Forget(RequestId id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FailAll(const absl::Status& status);
  // After a worker-caused step failure: replaces the group through
  // options_.recover and resets the ranks (true), or false when the failure
  // must fail every request instead.
  bool TryRecover(const absl::Status& cause);
  // Opens a Steps stream to each of `addresses` as workers_ (under streams_mu_).
  void OpenStreams(const std::vector<std::string>& addresses);
  // The step deadline (StepDriverOptions::step_timeout): the watchdog thread
  // cancels every stream when the loop has waited on one worker longer than
  // StepDeadline(); the loop then reports DEADLINE_EXCEEDED.
  void Watchdog();
  absl::Duration StepDeadline() const;
  // Marks the loop as waiting on worker `rank` for step `step` (Wait) or not
  // (Done); the watchdog reads these. `tokens`: the input tokens the step runs
  // over every rank (0 for a write), which scales its deadline.
  void WaitOn(size_t rank, uint64_t step, int64_t tokens = 0);
  // `ok`: the wait ended with the read or write done (its time is a step time).
  void DoneWaiting(bool ok);
  // The loop's error for a failed read or write of rank `r`: the deadline
  // error when the watchdog fired, else UNAVAILABLE naming the rank.
  absl::Status StreamError(size_t r, const char* what);

  const StepDriverOptions options_;
  scheduler::StepTypePolicy policy_;
  scheduler::LeastLoadedRouter router_;
  std::vector<Worker> workers_;

  mutable absl::Mutex mu_;
  // Guarded by mu_: the inbox, and everything the loop shares with callers.
  // Each with its queue deadline (Submit time + max_queue_time).
  std::vector<std::pair<SeqSubmission, absl::Time>> inbox_ ABSL_GUARDED_BY(mu_);
  std::vector<RequestId> cancels_ ABSL_GUARDED_BY(mu_);
  // Live or queued requests -> their prompt tokens.
  absl::flat_hash_map<RequestId, int64_t> known_ ABSL_GUARDED_BY(mu_);
  int64_t known_tokens_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<scheduler::RankLoad> loads_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status failure_ ABSL_GUARDED_BY(mu_);
  int64_t steps_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t preemptions_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t forks_ ABSL_GUARDED_BY(mu_) = 0;
  SpeculationStats speculation_ ABSL_GUARDED_BY(mu_);
  int64_t kv_checks_ ABSL_GUARDED_BY(mu_) = 0;
  // The expert-map commit asked for, until resolved; `commit_step_` is the
  // step that carries it once sent.
  struct PendingCommit {
    uint64_t version = 0;
    std::function<void(absl::Status)> done;
    bool sent = false;
    uint64_t step_id = 0;
  };
  std::optional<PendingCommit> commit_ ABSL_GUARDED_BY(mu_);
  // Step deadline. The loop writes wait_*; the watchdog reads them.
  std::atomic<int64_t> wait_since_ns_{0};  // absl::GetCurrentTimeNanos(); 0 = not waiting
  std::atomic<int64_t> wait_rank_{0};
  std::atomic<uint64_t> wait_step_{0};
  std::atomic<bool> deadline_fired_{false};
  std::atomic<int64_t> fired_deadline_ns_{0};  // the deadline in force when it fired
  // Durations (ns) of the last 64 completed waits' steps, ring (loop only),
  // and their maximum, published for the watchdog.
  // Each also as ns per input token (reads only; a step's tokens over all
  // ranks), whose maximum scales the deadline of a step with many tokens: the
  // first step after a recovery re-prefills every live request. Both survive
  // a recovery (the fresh workers run the same model on the same machines).
  std::vector<int64_t> recent_steps_ns_;
  std::vector<int64_t> recent_token_ns_;
  size_t recent_next_ = 0;
  std::atomic<int64_t> recent_max_ns_{0};
  std::atomic<int64_t> recent_max_token_ns_{0};
  std::atomic<int64_t> wait_tokens_{0};
  // Guards replacing workers_ (recovery) against the threads that cancel
  // their streams (watchdog, Stop); the loop reads workers_ without it.
  mutable absl::Mutex streams_mu_;
  std::vector<absl::Time> recovery_times_;  // loop thread only
  std::optional<absl::Status> recovery_request_ ABSL_GUARDED_BY(mu_);
  // When the pending recovery was first asked for (RequestRecovery).
  absl::Time recovery_requested_at_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  // Why the last recovery failed (loop thread only); FailAll names it.
  absl::Status recovery_error_;
  // The group epoch the open streams' plans carry (loop thread only).
  uint64_t group_epoch_ = 0;
  // `cause`, or when recovering from it failed, UNAVAILABLE naming both.
  absl::Status WithRecoveryError(const absl::Status& cause) const;
  bool worker_fault_ = false;  // ReadAndApply's error came from a worker (loop thread)
  RecoveryStats recovery_stats_ ABSL_GUARDED_BY(mu_);
  absl::Mutex watchdog_mu_;
  bool watchdog_stop_ ABSL_GUARDED_BY(watchdog_mu_) = false;
  std::thread watchdog_;

  // Owned by the loop thread.
  std::vector<std::unique_ptr<scheduler::RankScheduler>> ranks_;
  absl::flat_hash_map<RequestId, Live> live_;
  // Live requests with a queue deadline not yet admitted (subset of live_).
  int64_t num_queue_deadlines_ = 0;
  // kv_check_every_step only: per rank, what its worker holds after the
  // plans sent so far (block -> slot, slot -> blocks).
  struct KvMirror {
    absl::flat_hash_map<int32_t, int32_t> block_owner;
    absl::flat_hash_map<int32_t, std::vector<int32_t>> slot_blocks;
  };
  std::vector<KvMirror> kv_mirrors_;
  // Per in-flight step: for each rank, the request of each row.
  std::vector<std::vector<std::vector<RequestId>>> in_flight_;
  std::vector<int64_t> in_flight_tokens_;  // each in-flight step's input tokens
  uint64_t next_step_ = 0;  // the workers' step ids restart at 0 after a recovery
  int64_t steps_before_recovery_ = 0;
  std::thread thread_;
};

}  // namespace weir::coordinator

#endif  // WEIR_COORDINATOR_STEP_DRIVER_H_
