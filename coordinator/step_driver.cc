#include "coordinator/step_driver.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/grpc_util.h"
#include "coordinator/api_error.h"
#include "base/logging.h"

namespace weir::coordinator {
namespace {

constexpr char kDrainingMessage[] = "server is draining: not accepting new requests";

using scheduler::FinishReason;
using scheduler::RankLoad;
using scheduler::RankStepPlan;
using scheduler::RankStepResult;

v1::StepType ToProto(scheduler::StepType type) {
  return type == scheduler::StepType::kPrefill ? v1::STEP_TYPE_PREFILL : v1::STEP_TYPE_DECODE;
}

}  // namespace

absl::StatusOr<std::unique_ptr<StepDriver>> StepDriver::Create(
    const std::vector<std::string>& worker_addresses, StepDriverOptions options) {
  if (worker_addresses.empty()) return absl::InvalidArgumentError("StepDriver: no workers");
  absl::StatusOr<scheduler::StepTypePolicy> policy =
      scheduler::StepTypePolicy::Create(options.policy);
  if (!policy.ok()) return policy.status();
  std::unique_ptr<StepDriver> driver(new StepDriver(options, *policy));
  for (size_t r = 0; r < worker_addresses.size(); ++r) {
    absl::StatusOr<std::unique_ptr<scheduler::RankScheduler>> rank =
        scheduler::RankScheduler::Create(options.rank);
    if (!rank.ok()) return rank.status();
    driver->ranks_.push_back(std::move(*rank));
  }
  driver->OpenStreams(worker_addresses);
  driver->loads_.resize(worker_addresses.size());
  if (options.kv_check_every_step) driver->kv_mirrors_.resize(worker_addresses.size());
  driver->recent_steps_ns_.assign(64, 0);
  driver->recent_token_ns_.assign(64, 0);
  driver->thread_ = std::thread([d = driver.get()] { d->Loop(); });
  if (options.step_timeout > absl::ZeroDuration() &&
      options.step_timeout != absl::InfiniteDuration()) {
    driver->watchdog_ = std::thread([d = driver.get()] { d->Watchdog(); });
  }
  return driver;
}

void StepDriver::OpenStreams(const std::vector<std::string>& addresses) {
  group_epoch_ = options_.group_epoch ? options_.group_epoch() : 0;
  std::vector<Worker> workers;
  for (const std::string& address : addresses) {
    Worker worker;
    worker.stub = v1::Worker::NewStub(MakeChannel(address));
    worker.context = std::make_unique<grpc::ClientContext>();
    worker.stream = worker.stub->Steps(worker.context.get());
    workers.push_back(std::move(worker));
  }
  absl::MutexLock lock(&streams_mu_);
  workers_.swap(workers);
  // The old streams (if any) end here, already cancelled.
}

absl::Status StepDriver::failure() const {
  absl::MutexLock lock(&mu_);
  return failure_;
}

absl::Status StepDriver::Submit(SeqSubmission submission) {
  std::vector<SeqSubmission> one;
  one.push_back(std::move(submission));
  return SubmitGroup(std::move(one));
}

absl::Status StepDriver::SubmitGroup(std::vector<SeqSubmission> group) {
  if (group.empty()) return absl::OkStatus();
  const bool no_tokens = group.front().no_tokens;
  {
    absl::MutexLock lock(&mu_);
    if (!failure_.ok()) return absl::UnavailableError("step loop failed: " + failure_.ToString());
    if (stopping_) return absl::UnavailableError("server is stopping");
    if (draining_) return absl::UnavailableError(kDrainingMessage);
    if (!no_tokens) {
      int64_t tokens = 0;
      for (const SeqSubmission& sub : group) {
        tokens += static_cast<int64_t>(sub.request.prompt.size());
      }
      if (static_cast<int64_t>(known_.size() + group.size()) > options_.max_requests) {
        return WithReason(absl::ResourceExhaustedError(absl::StrCat(
                              "queue full: ", known_.size(), " requests in flight; retry later")),
                          kReasonQueueFull);
      }
      if (known_tokens_ + tokens > options_.max_prompt_tokens) {
        return WithReason(absl::ResourceExhaustedError(absl::StrCat(
                              "queue full: ", known_tokens_, " prompt tokens in flight, limit ",
                              options_.max_prompt_tokens, "; retry later")),
                          kReasonQueueFull);
      }
      for (size_t i = 0; i < group.size(); ++i) {
        const RequestId id = group[i].request.id;
        bool repeated = known_.contains(id);
        for (size_t j = 0; j < i && !repeated; ++j) repeated = group[j].request.id == id;
        if (repeated) {
          return absl::AlreadyExistsError(absl::StrCat("request ", id.value(), " is in flight"));
        }
      }
      for (SeqSubmission& sub : group) {
        const int64_t n = static_cast<int64_t>(sub.request.prompt.size());
        known_.emplace(sub.request.id, n);
        known_tokens_ += n;
        const absl::Time deadline = sub.max_queue_time.has_value()
                                        ? options_.clock() + *sub.max_queue_time
                                        : absl::InfiniteFuture();
        inbox_.emplace_back(std::move(sub), deadline);
      }
      return absl::OkStatus();
    }
  }
  for (SeqSubmission& sub : group) {
    SeqEvent ended;
    ended.finish = FinishReason::kWorkerEnded;
    sub.sink(ended);
  }
  return absl::OkStatus();
}

absl::Status StepDriver::Cancel(RequestId id) {
  absl::MutexLock lock(&mu_);
  if (!known_.contains(id)) return absl::NotFoundError("request not in flight");
  cancels_.push_back(id);
  return absl::OkStatus();
}

void StepDriver::Stop() {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_ && !thread_.joinable()) return;
    stopping_ = true;
  }
  // Cancel the streams first: a loop blocked on a worker that stopped
  // answering returns at once (its error becomes "server is stopping").
  {
    absl::MutexLock lock(&streams_mu_);
    for (Worker& worker : workers_) {
      if (worker.context) worker.context->TryCancel();
    }
  }
  if (thread_.joinable()) thread_.join();
  {
    absl::MutexLock lock(&watchdog_mu_);
    watchdog_stop_ = true;
  }
  if (watchdog_.joinable()) watchdog_.join();
  FailAll(absl::UnavailableError("server is stopping"));
}

int64_t StepDriver::Drain(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  draining_ = true;
  auto settled = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return known_.empty() || !failure_.ok() || stopping_;
  };
  mu_.AwaitWithTimeout(absl::Condition(&settled), timeout);
  return static_cast<int64_t>(known_.size());
}

absl::Duration StepDriver::StepDeadline() const {
  // The floor, 20x the slowest recent step, and 8x the step's tokens at the
  // slowest recent cost per token (the per-token cost of a small step counts
  // its fixed overhead too, so this errs long).
  const absl::Duration by_tokens =
      absl::Nanoseconds(recent_max_token_ns_.load()) * (8 * wait_tokens_.load());
  return std::max({options_.step_timeout, absl::Nanoseconds(recent_max_ns_.load()) * 20,
                   by_tokens});
}

void StepDriver::WaitOn(size_t rank, uint64_t step, int64_t tokens) {
  wait_rank_.store(static_cast<int64_t>(rank));
  wait_step_.store(step);
  wait_tokens_.store(tokens);
  wait_since_ns_.store(absl::GetCurrentTimeNanos());
}

void StepDriver::DoneWaiting(bool ok) {
  const int64_t since = wait_since_ns_.exchange(0);
  if (since == 0 || !ok) return;  // a failed wait says nothing of step times
  const int64_t took = absl::GetCurrentTimeNanos() - since;
  const int64_t tokens = wait_tokens_.load();
  recent_steps_ns_[recent_next_] = took;
  recent_token_ns_[recent_next_] = tokens > 0 ? took / tokens : 0;
  recent_next_ = (recent_next_ + 1) % recent_steps_ns_.size();
  recent_max_ns_.store(*std::max_element(recent_steps_ns_.begin(), recent_steps_ns_.end()));
  recent_max_token_ns_.store(
      *std::max_element(recent_token_ns_.begin(), recent_token_ns_.end()));
}

absl::Status StepDriver::StreamError(size_t r, const char* what) {
  {
    absl::MutexLock lock(&mu_);
    if (recovery_request_.has_value()) return *recovery_request_;  // we cancelled it
  }
  if (deadline_fired_.load()) {
    return absl::DeadlineExceededError(absl::StrCat(
        "worker rank ", wait_rank_.load(), " did not answer step ", wait_step_.load(),
        " within ", absl::FormatDuration(absl::Nanoseconds(fired_deadline_ns_.load())),
        " (stopped, hung or too slow; the coordinator's --step_timeout_s)"));
  }
  return absl::UnavailableError(absl::StrCat("worker rank ", r, " ", what));
}

void StepDriver::Watchdog() {
  const absl::Duration tick =
      std::clamp(options_.step_timeout / 20, absl::Milliseconds(10), absl::Milliseconds(500));
  while (true) {
    {
      absl::MutexLock lock(&watchdog_mu_);
      auto stop = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(watchdog_mu_) { return watchdog_stop_; };
      if (watchdog_mu_.AwaitWithTimeout(absl::Condition(&stop), tick)) return;
    }
    const int64_t since = wait_since_ns_.load();
    if (since == 0 || deadline_fired_.load()) continue;
    const absl::Duration deadline = StepDeadline();
    if (absl::Nanoseconds(absl::GetCurrentTimeNanos() - since) <= deadline) continue;
    fired_deadline_ns_.store(absl::ToInt64Nanoseconds(deadline));
    deadline_fired_.store(true);
    WEIR_LOG(ERROR) << "worker rank " << wait_rank_.load() << " has not answered step "
                    << wait_step_.load() << " for " << absl::FormatDuration(deadline)
                    << ": cancelling the step streams";
    absl::MutexLock lock(&streams_mu_);
    for (Worker& worker : workers_) worker.context->TryCancel();
  }
}

absl::Status StepDriver::CommitExpertMap(uint64_t version,
                                         std::function<void(absl::Status)> done) {
  absl::MutexLock lock(&mu_);
  if (stopping_ || !failure_.ok()) {
    return absl::UnavailableError("the step loop is not running");
  }
  if (commit_.has_value()) {
    return absl::FailedPreconditionError(
        absl::StrCat("expert map ", commit_->version, " is still being committed"));
  }
  commit_ = PendingCommit{.version = version, .done = std::move(done)};
  return absl::OkStatus();
}

void StepDriver::ResolveCommit(const absl::Status& status) {
  std::optional<PendingCommit> commit;
  {
    absl::MutexLock lock(&mu_);
    commit.swap(commit_);
  }
  if (commit.has_value()) commit->done(status);
}

StepDriver::AdmissionLoad StepDriver::Admission() const {
  absl::MutexLock lock(&mu_);
  return AdmissionLoad{.requests = static_cast<int64_t>(known_.size()),
                       .prompt_tokens = known_tokens_,
                       .limit_requests = options_.max_requests,
                       .limit_prompt_tokens = options_.max_prompt_tokens};
}

std::vector<RankLoad> StepDriver::Loads() const {
  absl::MutexLock lock(&mu_);
  return loads_;
}

int64_t StepDriver::preemptions() const {
  absl::MutexLock lock(&mu_);
  return preemptions_;
}

int64_t StepDriver::forks() const {
  absl::MutexLock lock(&mu_);
  return forks_;
}

StepDriver::SpeculationStats StepDriver::speculation() const {
  absl::MutexLock lock(&mu_);
  SpeculationStats stats = speculation_;
  stats.method = options_.speculative;
  stats.verify_length = options_.verify_length;
  return stats;
}

int64_t StepDriver::kv_checks() const {
  absl::MutexLock lock(&mu_);
  return kv_checks_;
}

int64_t StepDriver::steps() const {
  absl::MutexLock lock(&mu_);
  return steps_;
}

void StepDriver::Loop() {
  while (Iterate()) {
  }
}

bool StepDriver::Iterate() {
  std::optional<absl::Status> requested;
  std::vector<std::pair<SeqSubmission, absl::Time>> inbox;
  std::vector<RequestId> cancels;
  {
    absl::MutexLock lock(&mu_);
    const bool busy = !live_.empty() || !in_flight_.empty();
    if (!busy) {
      auto wake = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_ || !inbox_.empty() || !cancels_.empty() ||
               (commit_.has_value() && !commit_->sent) || recovery_request_.has_value();
      };
      mu_.AwaitWithTimeout(absl::Condition(&wake), absl::Milliseconds(200));
    }
    if (stopping_) return false;
    inbox.swap(inbox_);
    cancels.swap(cancels_);
    requested = recovery_request_;
  }
  if (requested.has_value()) {
    if (!TryRecover(*requested)) {
      FailAll(WithRecoveryError(*requested));
      return false;
    }
  }
  uint64_t commit_version = 0;
  for (auto& [sub, queue_deadline] : inbox) {
    std::vector<RankLoad> loads;
    for (const auto& rank : ranks_) loads.push_back(rank->Load());
    const RequestId id = sub.request.id;
    const uint32_t prompt_len = static_cast<uint32_t>(sub.request.prompt.size());
    absl::StatusOr<Rank> rank = router_.Route(sub.request, loads);
    if (sub.request.fork_of.has_value()) {
      // A sample that may fork another goes where that one is.
      auto source = live_.find(*sub.request.fork_of);
      if (source != live_.end()) rank = Rank(source->second.rank);
    }
    absl::Status added = rank.ok() ? ranks_[rank->value()]->Add(std::move(sub.request))
                                   : rank.status();
    if (!added.ok()) {
      sub.sink(SeqEvent{.error = added});
      absl::MutexLock lock(&mu_);
      Forget(id);
      continue;
    }
    live_[id] = Live{.rank = rank->value(), .sampling = std::move(sub.sampling),
                     .seed = sub.seed, .constraint = std::move(sub.constraint),
                     .prompt_len = prompt_len, .top_logprobs = sub.top_logprobs,
                     .prompt_logprobs = sub.prompt_logprobs,
                     .prompt_logprobs_sent = !sub.prompt_logprobs.has_value() || prompt_len < 2,
                     .sink = std::move(sub.sink),
                     .queue_deadline = queue_deadline};
    if (queue_deadline != absl::InfiniteFuture()) ++num_queue_deadlines_;
  }
  for (RequestId id : cancels) {
    auto it = live_.find(id);
    if (it == live_.end()) continue;
    if (ranks_[it->second.rank]->Cancel(id).ok()) {
      Finish(id, SeqEvent{.finish = FinishReason::kCancelled});
    }
  }
  if (options_.kv_check_every_step && !cancels.empty()) {
    if (absl::Status checked = CheckKv("after cancels"); !checked.ok()) {
      FailAll(checked);
      return false;
    }
  }

  bool work = false;
  std::vector<RankLoad> loads;
  for (const auto& rank : ranks_) {
    work |= rank->num_live() > 0;
    loads.push_back(rank->Load());
  }
  {
    // An expert-map commit rides on the next step (an empty one when idle).
    absl::MutexLock lock(&mu_);
    if (commit_.has_value() && !commit_->sent) {
      commit_->sent = true;
      commit_->step_id = next_step_;
      commit_version = commit_->version;
    }
  }
  if (work || commit_version != 0) {
    const scheduler::StepType type = policy_.Decide(loads);
    std::vector<RankStepPlan> plans;
    for (auto& rank : ranks_) {
      absl::StatusOr<RankStepPlan> plan = rank->BuildPlan(next_step_, type);
      if (!plan.ok()) {
        FailAll(absl::InternalError("planning failed: " + plan.status().ToString()));
        return false;
      }
      plans.push_back(std::move(*plan));
    }
    if (options_.kv_check_every_step) {
      if (absl::Status checked = MirrorAndCheckPlans(plans); !checked.ok()) {
        FailAll(checked);
        return false;
      }
    }
    if (absl::Status sent = SendPlans(plans, commit_version); !sent.ok()) {
      if (TryRecover(sent)) return true;
      FailAll(WithRecoveryError(sent));
      return false;
    }
    std::vector<std::vector<RequestId>> rows(plans.size());
    int64_t tokens = 0;
    for (size_t r = 0; r < plans.size(); ++r) {
      for (const scheduler::PlanRow& row : plans[r].rows) {
        rows[r].push_back(row.request);
        tokens += std::max<int64_t>(1, static_cast<int64_t>(row.input_tokens.size())) +
                  std::max(0, row.draft_tokens);
        if (num_queue_deadlines_ == 0) continue;
        auto live = live_.find(row.request);
        if (live != live_.end() && live->second.queue_deadline != absl::InfiniteFuture()) {
          live->second.queue_deadline = absl::InfiniteFuture();  // admitted
          --num_queue_deadlines_;
        }
      }
    }
    in_flight_.push_back(std::move(rows));
    in_flight_tokens_.push_back(tokens);
    ++next_step_;
    // After planning: each request this step admitted is past its queue
    // deadline check; those left waiting past theirs leave the queue.
    if (num_queue_deadlines_ > 0) ExpireQueued();
  }
  const bool must_read = !in_flight_.empty() &&
                         (!options_.zero_overhead || in_flight_.size() >= 2 || !work);
  if (must_read) {
    if (absl::Status applied = ReadAndApply(); !applied.ok()) {
      // A worker's fault (its stream, its step error, the deadline) is
      // recovered from; the books' own errors are not.
      if (worker_fault_ && TryRecover(applied)) return true;
      FailAll(WithRecoveryError(applied));
      return false;
    }
    if (options_.kv_check_every_step) {
      if (absl::Status checked = CheckKv("after a step result"); !checked.ok()) {
        FailAll(checked);
        return false;
      }
    }
  }
  absl::MutexLock lock(&mu_);
  loads_.clear();
  preemptions_ = 0;
  forks_ = 0;
  speculation_ = {};
  for (const auto& rank : ranks_) {
    loads_.push_back(rank->Load());
    preemptions_ += rank->num_preemptions();
    forks_ += rank->num_forks();
    const std::vector<int64_t>& hist = rank->accepted_histogram();
    speculation_.accepted_histogram.resize(hist.size(), 0);
    for (size_t a = 0; a < hist.size(); ++a) speculation_.accepted_histogram[a] += hist[a];
    speculation_.verified_drafts += rank->verified_drafts();
    speculation_.paused_steps += rank->paused_steps();
    speculation_.lookup_verifications += rank->lookup_verifications();
    speculation_.lookup_accepted += rank->lookup_accepted();
  }
  steps_ = steps_before_recovery_ + static_cast<int64_t>(next_step_);
  return true;
}

absl::Status StepDriver::SendPlans(const std::vector<RankStepPlan>& plans,
                                   uint64_t commit_version) {
  for (size_t r = 0; r < plans.size(); ++r) {
    const RankStepPlan& plan = plans[r];
    v1::StepPlan out;
    out.set_coordinator_epoch(options_.epoch);
    out.set_group_epoch(group_epoch_);
    out.set_commit_expert_map(commit_version);
    out.set_step_id(plan.step_id);
    out.set_type(ToProto(plan.type));
    for (const scheduler::PlanRow& row : plan.rows) {
      v1::StepRow* proto = out.add_rows();
      proto->set_seq_slot(row.slot.value());
      proto->set_start_pos(static_cast<uint32_t>(row.start_pos));
      for (uint32_t t : row.input_tokens) proto->add_input_tokens(t);
      if (row.remap >= 0) proto->set_remap(row.remap);
      for (BlockId block : row.new_blocks) proto->add_new_blocks(block.value());
      proto->set_sample(row.samples);
      if (row.fork_from.has_value()) proto->set_fork_from(row.fork_from->value());
      if (row.draft_tokens >= 0) proto->set_draft_tokens(static_cast<uint32_t>(row.draft_tokens));
      auto live = live_.find(row.request);
      if (live != live_.end()) {
        *proto->mutable_sampling() = live->second.sampling;
        proto->set_seed(live->second.seed);
        // Past the original prompt, a (recomputed) sequence's inputs are its
        // own earlier output: they count as output for the penalties.
        if (row.start_pos == 0) {
          proto->set_output_from(live->second.prompt_len);
          // A scored prompt needs every position's logits: no CED replay
          // (recomputes too, so that the outputs do not change).
          proto->set_exact_prefill(live->second.prompt_logprobs.has_value());
        }
        if ((row.start_pos == 0 || row.fork_from.has_value()) &&
            live->second.constraint.kind_case() != v1::StructuredOutput::KIND_NOT_SET) {
          // A recompute's prompt includes the generated tokens: the worker
          // replays those (positions >= the original prompt) through the grammar.
          *proto->mutable_constraint() = live->second.constraint;
          proto->set_constrained_from(live->second.prompt_len);
        }
        if (live->second.top_logprobs > 0 && row.samples) {
          proto->set_logprobs(live->second.top_logprobs);
        }
        if (!live->second.prompt_logprobs_sent && row.start_pos < live->second.prompt_len) {
          proto->set_prompt_logprobs(*live->second.prompt_logprobs);
          proto->set_prompt_end(live->second.prompt_len);
        }
      }
    }
    for (SeqSlot slot : plan.release_slots) out.add_release_slots(slot.value());
    if (!options_.eplb_address.empty() && options_.stat_interval > 0 &&
        plan.step_id % options_.stat_interval ==
            static_cast<uint64_t>(options_.stat_interval - 1)) {
      out.set_return_expert_load(true);
    }
    WaitOn(r, plan.step_id);
    const bool written = workers_[r].stream->Write(out);
    DoneWaiting(written);
    if (!written) return StreamError(r, "closed its Steps stream");
  }
  return absl::OkStatus();
}

absl::Status StepDriver::ReadAndApply() {
  worker_fault_ = true;  // until the scheduler's own books are at stake
  std::vector<std::vector<RequestId>> rows_of = std::move(in_flight_.front());
  in_flight_.erase(in_flight_.begin());
  const int64_t step_tokens = in_flight_tokens_.front();
  in_flight_tokens_.erase(in_flight_tokens_.begin());
  uint64_t step_id = 0;
  for (size_t r = 0; r < workers_.size(); ++r) {
    v1::StepResult result;
    WaitOn(r, next_step_ - in_flight_.size() - 1, step_tokens);
    const bool read = workers_[r].stream->Read(&result);
    DoneWaiting(read);
    if (!read) return StreamError(r, "closed its Steps stream");
    if (result.error().code() != 0) {
      return absl::Status(static_cast<absl::StatusCode>(result.error().code()),
                          absl::StrCat("worker rank ", r, " failed step ", result.step_id(),
                                       ": ", result.error().message()));
    }
    if (static_cast<size_t>(result.rows_size()) != rows_of[r].size()) {
      return absl::InternalError(absl::StrCat("worker rank ", r, " returned ", result.rows_size(),
                                              " rows for ", rows_of[r].size()));
    }
    step_id = result.step_id();
    RankStepResult applied{.step_id = result.step_id()};
    // The emitted tokens' logprobs by request (a request has one row a
    // step): a speculative row's accepted drafts, then its own sample.
    absl::flat_hash_map<RequestId, std::vector<const v1::TokenLogprobs*>> sampled;
    for (int i = 0; i < result.rows_size(); ++i) {
      const v1::RowResult& row = result.rows(i);
      applied.rows.push_back({.tokens = {row.tokens().begin(), row.tokens().end()},
                              .finished = row.finished(),
                              .verified_drafts = static_cast<int32_t>(row.verified_drafts()),
                              .drafts_paused = row.drafts_paused(),
                              .lookup_drafts = row.lookup_drafts()});
      if (row.has_sampled_logprobs()) {
        std::vector<const v1::TokenLogprobs*>& scored = sampled[rows_of[r][i]];
        for (const v1::TokenLogprobs& draft : row.accepted_logprobs()) scored.push_back(&draft);
        scored.push_back(&row.sampled_logprobs());
      }
      if (row.prompt_logprobs_size() > 0) TakePromptLogprobs(rows_of[r][i], row);
      if (row.error().code() != 0 && live_.contains(rows_of[r][i])) {
        const RequestId id = rows_of[r][i];
        ranks_[r]->Cancel(id).IgnoreError();
        Finish(id, SeqEvent{.error = absl::Status(static_cast<absl::StatusCode>(
                                                      row.error().code()),
                                                  row.error().message())});
      }
    }
    absl::StatusOr<std::vector<scheduler::SeqUpdate>> updates = ranks_[r]->OnResult(applied);
    if (!updates.ok()) {
      worker_fault_ = false;
      return updates.status();
    }
    for (scheduler::SeqUpdate& update : *updates) {
      auto live = live_.find(update.request);
      if (live == live_.end()) continue;
      SeqEvent event{.tokens = std::move(update.new_tokens),
                     .finish = update.finish,
                     .accepted_drafts = update.accepted_drafts,
                     .rejected_drafts = update.rejected_drafts};
      if (live->second.top_logprobs > 0) {
        // The tokens of this step's row of the request (OnResult takes the
        // first token of a plain sampling row; all of a speculative row's up
        // to a stop); a row without them leaves the event without logprobs
        // rather than misaligned.
        auto scored = sampled.find(update.request);
        const bool aligned =
            scored != sampled.end() && event.tokens.size() <= scored->second.size() &&
            std::equal(event.tokens.begin(), event.tokens.end(), scored->second.begin(),
                       [](uint32_t token, const v1::TokenLogprobs* entry) {
                         return entry->token_id() == token;
                       });
        if (aligned) {
          for (size_t k = 0; k < event.tokens.size(); ++k) {
            event.logprobs.push_back(*scored->second[k]);
          }
        }
      }
      if (event.done()) {
        Finish(update.request, event);
      } else {
        live->second.sink(event);
      }
    }
  }
  bool committed = false;
  {
    absl::MutexLock lock(&mu_);
    committed = commit_.has_value() && commit_->sent && commit_->step_id == step_id;
  }
  if (committed) ResolveCommit(absl::OkStatus());
  return absl::OkStatus();
}

void StepDriver::TakePromptLogprobs(RequestId id, const v1::RowResult& row) {
  auto it = live_.find(id);
  if (it == live_.end() || it->second.prompt_logprobs_sent) return;
  Live& live = it->second;
  // Rows arrive in position order; a recompute (preemption, recovery) sends
  // positions again from 1, and only the next one missing is taken.
  for (int j = 0; j < row.prompt_logprobs_size(); ++j) {
    const uint32_t pos = row.prompt_logprobs_from() + static_cast<uint32_t>(j);
    if (pos != live.next_prompt_pos || pos >= live.prompt_len) continue;
    live.prompt_entries.push_back(row.prompt_logprobs(j));
    ++live.next_prompt_pos;
  }
  if (live.next_prompt_pos < live.prompt_len) return;
  live.prompt_logprobs_sent = true;
  live.sink(SeqEvent{.prompt_logprobs = std::move(live.prompt_entries)});
  live.prompt_entries.clear();
}

absl::Status StepDriver::MirrorAndCheckPlans(const std::vector<RankStepPlan>& plans) {
  for (size_t r = 0; r < plans.size(); ++r) {
    const RankStepPlan& plan = plans[r];
    KvMirror& mirror = kv_mirrors_[r];
    // The worker's order: the plan's releases, then its rows.
    for (SeqSlot slot : plan.release_slots) {
      auto it = mirror.slot_blocks.find(slot.value());
      if (it == mirror.slot_blocks.end()) continue;
      for (int32_t b : it->second) mirror.block_owner.erase(b);
      mirror.slot_blocks.erase(it);
    }
    for (const scheduler::PlanRow& row : plan.rows) {
      for (BlockId b : row.new_blocks) {
        auto [owner, fresh] = mirror.block_owner.emplace(b.value(), row.slot.value());
        if (!fresh) {
          const absl::Status failed = absl::InternalError(absl::StrCat(
              "KV accounting check failed (kv_check_every_step) in the plan of step ",
              plan.step_id, ", rank ", r, ": block ", b.value(), " given to slot ",
              row.slot.value(), " (request ", row.request.value(), ") is still held by slot ",
              owner->second, " (double ownership)"));
          WEIR_LOG(ERROR) << failed;
          return failed;
        }
        mirror.slot_blocks[row.slot.value()].push_back(b.value());
      }
    }
  }
  return CheckKv("after planning");
}

absl::Status StepDriver::CheckKv(const char* when) {
  for (size_t r = 0; r < ranks_.size(); ++r) {
    const scheduler::BlockManager& books = ranks_[r]->blocks();
    absl::Status status = books.VerifyAccounting();
    if (status.ok() && books.num_free_blocks() + books.num_used_blocks() != books.num_blocks()) {
      status = absl::InternalError(absl::StrCat(books.num_free_blocks(), " free + ",
                                                books.num_used_blocks(), " used != ",
                                                books.num_blocks(), " blocks"));
    }
    if (status.ok() && !kv_mirrors_.empty()) {
      const std::vector<SeqSlot>& queued = ranks_[r]->slots_to_release();
      for (const auto& [block, slot] : kv_mirrors_[r].block_owner) {
        if (block < 0 || block >= books.num_blocks()) {
          status = absl::InternalError(
              absl::StrCat("the worker holds block ", block, " outside the pool (slot ", slot, ")"));
          break;
        }
        if (books.references(BlockId(block)) > 0) continue;
        if (std::find(queued.begin(), queued.end(), SeqSlot(slot)) == queued.end()) {
          status = absl::InternalError(absl::StrCat(
              "block ", block, " is free in the books but the worker's slot ", slot,
              " still holds it with no release queued (leaked to the worker)"));
          break;
        }
      }
    }
    if (!status.ok()) {
      const absl::Status failed = absl::InternalError(absl::StrCat(
          "KV accounting check failed (kv_check_every_step) ", when, ", rank ", r,
          ", next step ", next_step_, ": ", status.message()));
      WEIR_LOG(ERROR) << failed;
      return failed;
    }
  }
  absl::MutexLock lock(&mu_);
  ++kv_checks_;
  return absl::OkStatus();
}

void StepDriver::ExpireQueued() {
  const absl::Time now = options_.clock();
  std::vector<std::pair<RequestId, absl::Time>> expired;
  for (const auto& [id, live] : live_) {
    // A sample waiting to fork a started prefill is as good as admitted.
    if (live.queue_deadline <= now && !ranks_[live.rank]->WaitsForAdmittedSource(id)) {
      expired.emplace_back(id, live.queue_deadline);
    }
  }
  for (const auto& [id, deadline] : expired) {
    // Never admitted: the scheduler holds only its queue entry (no slot, no
    // KV), which Cancel drops.
    if (!ranks_[live_[id].rank]->Cancel(id).ok()) continue;
    Finish(id, SeqEvent{.error = WithReason(
                            absl::ResourceExhaustedError(
                                "QUEUE_TIMEOUT: not admitted within max_queue_time; retry later"),
                            kReasonQueueTimeout)});
  }
}

void StepDriver::Finish(RequestId id, const SeqEvent& event) {
  auto it = live_.find(id);
  if (it == live_.end()) return;
  if (it->second.queue_deadline != absl::InfiniteFuture()) --num_queue_deadlines_;
  it->second.sink(event);
  live_.erase(it);
  absl::MutexLock lock(&mu_);
  Forget(id);
}

void StepDriver::Forget(RequestId id) {
  auto it = known_.find(id);
  if (it == known_.end()) return;
  known_tokens_ -= it->second;
  known_.erase(it);
}

void StepDriver::FailAll(const absl::Status& given) {
  absl::Status status = given;
  bool first_failure = false;
  {
    absl::MutexLock lock(&mu_);
    // Stop cancelled the streams: whatever the loop saw, the cause is the stop.
    if (stopping_) status = absl::UnavailableError("server is stopping");
    // The cause is recorded before any request hears of it, so a client that
    // sees its request fail finds why in failure() (GetServerState), and a
    // submission from inside a sink is refused with it.
    if (failure_.ok()) {
      failure_ = status;
      first_failure = !stopping_;
    }
  }
  if (!live_.empty()) WEIR_LOG(ERROR) << "failing " << live_.size() << " requests: " << status;
  for (auto& [id, live] : live_) live.sink(SeqEvent{.error = status});
  live_.clear();
  num_queue_deadlines_ = 0;
  in_flight_.clear();
  in_flight_tokens_.clear();
  std::vector<std::pair<SeqSubmission, absl::Time>> inbox;
  {
    absl::MutexLock lock(&mu_);
    inbox.swap(inbox_);
    known_.clear();
    known_tokens_ = 0;
  }
  for (auto& [sub, deadline] : inbox) sub.sink(SeqEvent{.error = status});
  ResolveCommit(status);
  if (first_failure && options_.on_failure) options_.on_failure(status);
}

}  // namespace weir::coordinator
