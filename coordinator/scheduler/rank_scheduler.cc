// coordinator/scheduler/rank_scheduler.cc
//
// Admission, cancellation, results. Planning is in rank_scheduler_plan.cc.

#include "coordinator/scheduler/rank_scheduler.h"

#include <algorithm>
#include <string_view>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "base/logging.h"

namespace weir::coordinator::scheduler {

absl::StatusOr<std::unique_ptr<RankScheduler>> RankScheduler::Create(
    const RankSchedulerConfig& config) {
  absl::StatusOr<BlockManager> blocks = BlockManager::Create(config.kv);
  if (!blocks.ok()) return blocks.status();
  if (config.max_model_len < 2 || config.max_prefill_tokens < 1 || config.max_decode_batch < 1 ||
      config.max_running < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("need max_model_len >= 2, max_prefill_tokens >= 1, max_decode_batch >= 1, "
                     "max_running >= 0; got ",
                     config.max_model_len, ", ", config.max_prefill_tokens, ", ",
                     config.max_decode_batch, ", ", config.max_running));
  }
  if (config.num_draft_tokens < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("need num_draft_tokens >= 0; got ", config.num_draft_tokens));
  }
  if (config.max_running_per_tenant < 0) {
    return absl::InvalidArgumentError(absl::StrCat("need max_running_per_tenant >= 0; got ",
                                                   config.max_running_per_tenant));
  }
  RankSchedulerConfig c = config;
  if (c.max_running == 0) c.max_running = c.max_decode_batch;
  return std::unique_ptr<RankScheduler>(new RankScheduler(c, *std::move(blocks)));
}

RankScheduler::RankScheduler(const RankSchedulerConfig& config, BlockManager blocks)
    : config_(config),
      blocks_(std::move(blocks)),
      accepted_histogram_(config.num_draft_tokens > 0 ? config.num_draft_tokens + 1 : 0, 0) {}

absl::Status RankScheduler::Add(SeqRequest request) {
  const int64_t prompt_len = static_cast<int64_t>(request.prompt.size());
  if (prompt_len == 0 || request.max_new_tokens == 0) {
    return absl::InvalidArgumentError("need a non-empty prompt and max_new_tokens >= 1");
  }
  if (prompt_len >= config_.max_model_len) {
    return absl::InvalidArgumentError(absl::StrCat("prompt of ", prompt_len,
                                                   " tokens leaves no room under max_model_len ",
                                                   config_.max_model_len));
  }
  const int64_t longest =
      std::min<int64_t>(prompt_len + request.max_new_tokens, config_.max_model_len);
  if (BlocksForTokens(config_.kv, longest) > blocks_.num_blocks()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a sequence of ", longest, " tokens needs ", BlocksForTokens(config_.kv, longest),
        " KV blocks; the pool has ", blocks_.num_blocks()));
  }
  if (seqs_.contains(request.id)) {
    return absl::AlreadyExistsError(absl::StrCat("request ", request.id.value(), " is live"));
  }
  const RequestId id = request.id;
  Sequence seq;
  seq.tokens = request.prompt;
  seq.request = std::move(request);
  seq.arrival = next_arrival_++;
  seq.ticket = next_ticket_++;
  seq.prefill_len = prompt_len;
  waiting_blocks_ += BlocksForTokens(config_.kv, seq.prefill_len);
  if (seq.request.fork_of.has_value()) {
    // Shares the prompt's prefill only while the other sample has not passed
    // its last prompt position in its first epoch.
    auto parent = seqs_.find(*seq.request.fork_of);
    if (parent != seqs_.end() && parent->second.state != SeqState::kRunning &&
        parent->second.prefill_len == static_cast<int64_t>(parent->second.request.prompt.size()) &&
        parent->second.prefill_len >= 2 &&
        parent->second.num_scheduled < parent->second.prefill_len - 1 &&
        parent->second.tokens == seq.tokens && !parent->second.request.fork_of.has_value()) {
      parent->second.fork_children.push_back(id);
    }
  }
  seqs_.emplace(id, std::move(seq));
  Enqueue(id, /*front=*/false);
  return absl::OkStatus();
}

absl::Status RankScheduler::Cancel(RequestId id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) {
    return absl::NotFoundError(absl::StrCat("request ", id.value(), " is not live"));
  }
  Sequence& seq = it->second;
  if (seq.state == SeqState::kWaiting) {
    waiting_.erase(std::find(waiting_.begin(), waiting_.end(), id));
    waiting_blocks_ -= BlocksForTokens(config_.kv, seq.prefill_len);
  } else {
    ReleaseKv(seq);
    Unlist(id, seq.state);
  }
  seqs_.erase(it);
  return absl::OkStatus();
}

RankLoad RankScheduler::Load() const {
  RankLoad load;
  load.num_waiting = static_cast<int64_t>(waiting_.size());
  load.num_waiting_blocks = waiting_blocks_;
  load.num_prefilling = static_cast<int64_t>(prefilling_.size());
  load.num_running = static_cast<int64_t>(running_.size());
  load.num_free_blocks = blocks_.num_free_blocks();
  load.num_used_blocks = blocks_.num_used_blocks();
  load.num_blocks = blocks_.num_blocks();
  load.num_pending_release_blocks = blocks_.num_pending_release_blocks();
  load.block_tokens = config_.kv.block_tokens;
  load.num_free_slots = blocks_.num_free_slots();
  load.num_seq_slots = config_.kv.num_seq_slots;
  load.has_decode_work = !running_.empty();
  bool head_admissible = false;
  if (!waiting_.empty() && load.num_prefilling + load.num_running < config_.max_running) {
    auto next = NextToAdmit();
    head_admissible = next != waiting_.end() && CanAdmit(seqs_.at(*next));
  }
  load.has_prefill_work = !prefilling_.empty() || head_admissible;
  return load;
}

bool RankScheduler::CanAdmit(const Sequence& seq) const {
  int64_t reserved = 0;
  for (const auto& [id, shortfall] : starved_) {
    auto it = seqs_.find(id);
    if (it != seqs_.end() && it->second.state == SeqState::kRunning) reserved += shortfall;
  }
  return blocks_.num_free_slots() > 0 &&
         BlocksForTokens(config_.kv, seq.prefill_len) + reserved <= blocks_.num_free_blocks();
}

bool RankScheduler::HeldForFork(const Sequence& seq) const {
  if (!seq.request.fork_of.has_value()) return false;
  auto parent = seqs_.find(*seq.request.fork_of);
  if (parent == seqs_.end()) return false;
  const std::vector<RequestId>& children = parent->second.fork_children;
  return std::find(children.begin(), children.end(), seq.request.id) != children.end();
}

bool RankScheduler::WaitsForAdmittedSource(RequestId id) const {
  auto it = seqs_.find(id);
  if (it == seqs_.end() || !HeldForFork(it->second)) return false;
  return seqs_.at(*it->second.request.fork_of).state != SeqState::kWaiting;
}

int32_t RankScheduler::AdmittedOf(const std::string& tenant) const {
  int32_t n = 0;
  for (const std::vector<RequestId>* list : {&prefilling_, &running_}) {
    for (RequestId id : *list) n += seqs_.at(id).request.tenant == tenant;
  }
  return n;
}

std::deque<RequestId>::const_iterator RankScheduler::NextToAdmit() const {
  absl::flat_hash_map<std::string_view, int32_t> admitted;
  for (const std::vector<RequestId>* list : {&prefilling_, &running_}) {
    for (RequestId id : *list) ++admitted[seqs_.at(id).request.tenant];
  }
  auto best = waiting_.end();
  int32_t best_count = 0;
  for (auto it = waiting_.begin(); it != waiting_.end(); ++it) {
    if (HeldForFork(seqs_.at(*it))) continue;
    const SeqRequest& request = seqs_.at(*it).request;
    // The queue is ordered by priority: a less urgent one never goes first.
    if (best != waiting_.end() && request.priority != seqs_.at(*best).request.priority) break;
    auto found = admitted.find(request.tenant);
    const int32_t count = found == admitted.end() ? 0 : found->second;
    if (config_.max_running_per_tenant > 0 && count >= config_.max_running_per_tenant) continue;
    if (best == waiting_.end() || count < best_count) {
      best = it;
      best_count = count;
      if (count == 0) break;  // No one can have fewer; earlier ones won ties.
    }
  }
  return best;
}

void RankScheduler::ReleaseKv(Sequence& seq) {
  const SeqAllocation* alloc = blocks_.Find(seq.request.id);
  if (alloc == nullptr) return;
  release_next_.push_back(alloc->slot);
  const absl::Status s = seq.last_step.has_value()
                             ? blocks_.ReleaseAfterStep(seq.request.id, *seq.last_step)
                             : blocks_.Free(seq.request.id);
  WEIR_CHECK(s.ok()) << s << " (the allocation was just found)";
}

void RankScheduler::Unlist(RequestId id, SeqState state) {
  std::vector<RequestId>& list = state == SeqState::kPrefilling ? prefilling_ : running_;
  list.erase(std::find(list.begin(), list.end(), id));
}

void RankScheduler::StartNewEpoch(Sequence& seq) {
  seq.state = SeqState::kWaiting;
  // Its waiting forks are prefilled on their own now.
  seq.fork_children.clear();
  ++seq.reset_epoch;
  seq.ticket = next_ticket_++;
  seq.prefill_len = static_cast<int64_t>(seq.tokens.size());
  seq.num_scheduled = 0;
  seq.blocks_sent = 0;
  seq.pending_outputs = 0;
  seq.last_step.reset();
  seq.last_row = -1;
  waiting_blocks_ += BlocksForTokens(config_.kv, seq.prefill_len);
}

void RankScheduler::Enqueue(RequestId id, bool front) {
  const int32_t priority = seqs_.at(id).request.priority;
  auto at = std::find_if(waiting_.begin(), waiting_.end(), [&](RequestId other) {
    const int32_t p = seqs_.at(other).request.priority;
    return front ? p >= priority : p > priority;
  });
  waiting_.insert(at, id);
}

void RankScheduler::Preempt(Sequence& seq) {
  ReleaseKv(seq);
  Unlist(seq.request.id, seq.state);
  StartNewEpoch(seq);
  Enqueue(seq.request.id, /*front=*/true);
  ++num_preemptions_;
}

void RankScheduler::ResetAfterWorkerLoss() {
  std::vector<RequestId> order(prefilling_.begin(), prefilling_.end());
  order.insert(order.end(), running_.begin(), running_.end());
  std::sort(order.begin(), order.end(), [this](RequestId a, RequestId b) {
    return seqs_.at(a).arrival < seqs_.at(b).arrival;
  });
  order.insert(order.end(), waiting_.begin(), waiting_.end());
  prefilling_.clear();
  running_.clear();
  waiting_.clear();
  in_flight_.clear();
  release_next_.clear();
  starved_.clear();
  last_planned_step_.reset();
  waiting_blocks_ = 0;
  absl::StatusOr<BlockManager> fresh = BlockManager::Create(config_.kv);
  WEIR_CHECK(fresh.ok()) << fresh.status() << " (the layout was valid at Create)";
  blocks_ = *std::move(fresh);
  for (RequestId id : order) {
    StartNewEpoch(seqs_.at(id));
    Enqueue(id, /*front=*/false);
  }
}

absl::StatusOr<std::vector<SeqUpdate>> RankScheduler::OnResult(const RankStepResult& result) {
  if (in_flight_.empty() || in_flight_.front().step_id != result.step_id) {
    return absl::FailedPreconditionError(absl::StrCat(
        "result of step ", result.step_id, " but the oldest unreturned step is ",
        in_flight_.empty() ? std::string("none") : absl::StrCat(in_flight_.front().step_id)));
  }
  const std::vector<RowRef>& refs = in_flight_.front().rows;
  if (result.rows.size() != refs.size()) {
    return absl::InvalidArgumentError(absl::StrCat("step ", result.step_id, " planned ",
                                                   refs.size(), " rows, result has ",
                                                   result.rows.size()));
  }
  auto live = [&](const RowRef& ref) -> Sequence* {
    auto it = seqs_.find(ref.request);
    return it != seqs_.end() && it->second.ticket == ref.ticket ? &it->second : nullptr;
  };
  for (size_t i = 0; i < refs.size(); ++i) {
    if (refs[i].samples && result.rows[i].tokens.empty() && live(refs[i]) != nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("step ", result.step_id, " row ", i, " sampled no token"));
    }
    if (refs[i].draft_tokens >= 0 &&
        result.rows[i].tokens.size() > static_cast<size_t>(refs[i].draft_tokens) + 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("step ", result.step_id, " row ", i, " emitted ",
                       result.rows[i].tokens.size(), " tokens for ", refs[i].draft_tokens,
                       " drafts"));
    }
  }
  std::vector<SeqUpdate> updates;
  for (size_t i = 0; i < refs.size(); ++i) {
    Sequence* seq = refs[i].samples ? live(refs[i]) : nullptr;
    if (seq == nullptr) continue;  // an intermediate chunk, or a dropped epoch
    WEIR_DCHECK(seq->pending_outputs > 0);
    --seq->pending_outputs;
    const std::vector<uint32_t>& emitted = result.rows[i].tokens;
    // A plain row emits its first token; a speculative one all of them.
    const size_t n = refs[i].draft_tokens >= 0 ? emitted.size() : 1;
    if (refs[i].draft_tokens >= 0) {
      // The row wrote n positions; its plan counted 1 + draft_tokens.
      seq->num_scheduled -= 1 + refs[i].draft_tokens - static_cast<int64_t>(n);
    }
    int32_t rejected = 0;
    if (refs[i].draft_tokens > 0 && result.rows[i].drafts_paused) {
      ++paused_steps_;
    } else if (refs[i].draft_tokens > 0 && n - 1 < accepted_histogram_.size()) {
      ++accepted_histogram_[n - 1];
      const int64_t verified =
          std::clamp<int64_t>(result.rows[i].verified_drafts, 0, refs[i].draft_tokens);
      verified_drafts_ += verified;
      if (result.rows[i].lookup_drafts) {
        ++lookup_verifications_;
        lookup_accepted_ += static_cast<int64_t>(n - 1);
      }
      // n - 1 drafts were accepted (the last token is the target's own).
      rejected = static_cast<int32_t>(std::max<int64_t>(verified - static_cast<int64_t>(n - 1), 0));
    }
    SeqUpdate update{seq->request.id, {}, FinishReason::kNone};
    update.rejected_drafts = rejected;
    // Stop conditions apply token by token: what follows a stop is dropped.
    for (size_t k = 0; k < n && update.finish == FinishReason::kNone; ++k) {
      seq->tokens.push_back(emitted[k]);
      update.new_tokens.push_back(emitted[k]);
      if (k + 1 < n) ++update.accepted_drafts;
      update.finish = CheckStop(*seq, config_.eos_token_ids, config_.max_model_len);
    }
    if (update.finish == FinishReason::kNone && result.rows[i].finished) {
      update.finish = FinishReason::kWorkerEnded;
    }
    if (update.finish != FinishReason::kNone) {
      ReleaseKv(*seq);
      Unlist(seq->request.id, seq->state);
      seqs_.erase(seq->request.id);
    }
    updates.push_back(std::move(update));
  }
  in_flight_.pop_front();
  blocks_.OnStepReturned(result.step_id);
  return updates;
}

}  // namespace weir::coordinator::scheduler
