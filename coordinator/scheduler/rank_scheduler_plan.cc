// coordinator/scheduler/rank_scheduler_plan.cc
//
// Building one step's plan: chunked prefill and admission, decode selection
// (LCFS over the batch limit), block growth and preemption by recompute.

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/logging.h"
#include "coordinator/scheduler/rank_scheduler.h"

namespace weir::coordinator::scheduler {

absl::StatusOr<RankStepPlan> RankScheduler::BuildPlan(uint64_t step_id, StepType type) {
  if (last_planned_step_.has_value() && step_id != *last_planned_step_ + 1) {
    return absl::FailedPreconditionError(
        absl::StrCat("step ", step_id, " planned after step ", *last_planned_step_));
  }
  if (in_flight_.size() >= 2) {
    return absl::FailedPreconditionError(
        absl::StrCat("steps ", in_flight_[0].step_id, " and ", in_flight_[1].step_id,
                     " have not returned; plan at most one step ahead"));
  }
  last_planned_step_ = step_id;
  RankStepPlan plan;
  plan.step_id = step_id;
  plan.type = type;
  if (type == StepType::kPrefill) {
    SchedulePrefill(plan);
  } else {
    ScheduleDecode(plan);
  }
  // Preemption above may have added slots; all go before the rows.
  plan.release_slots = std::move(release_next_);
  release_next_.clear();
  InFlightStep step{step_id, {}};
  step.rows.reserve(plan.rows.size());
  for (const PlanRow& row : plan.rows) {
    step.rows.push_back(
        {row.request, seqs_.at(row.request).ticket, row.samples, row.draft_tokens});
  }
  in_flight_.push_back(std::move(step));
  return plan;
}

void RankScheduler::AnnounceBlocks(Sequence& seq, PlanRow& row) {
  const SeqAllocation* alloc = blocks_.Find(seq.request.id);
  WEIR_CHECK(alloc != nullptr) << "a planned sequence holds KV";
  row.slot = alloc->slot;
  const int64_t needed = BlocksForTokens(config_.kv, seq.num_scheduled);
  for (; seq.blocks_sent < needed; ++seq.blocks_sent) {
    row.new_blocks.push_back(alloc->blocks[seq.blocks_sent]);
  }
}

int64_t RankScheduler::AddPrefillChunk(Sequence& seq, int64_t budget, RankStepPlan& plan) {
  int64_t n = std::min(budget, seq.prefill_len - seq.num_scheduled);
  if (!seq.fork_children.empty() && seq.num_scheduled < seq.prefill_len - 1) {
    // Forks copy the sequence before its last prompt token: that one runs
    // in the step that forks them (each fork forwards it too and samples).
    n = std::min(n, seq.prefill_len - 1 - seq.num_scheduled);
  }
  PlanRow row;
  row.request = seq.request.id;
  row.reset_epoch = seq.reset_epoch;
  row.start_pos = seq.num_scheduled;
  row.input_tokens.assign(seq.tokens.begin() + seq.num_scheduled,
                          seq.tokens.begin() + seq.num_scheduled + n);
  seq.num_scheduled += n;
  row.samples = seq.num_scheduled == seq.prefill_len;
  // The first token's row drafts for the first decode row.
  if (row.samples && Speculates(seq)) row.draft_tokens = 0;
  AnnounceBlocks(seq, row);
  seq.last_step = plan.step_id;
  seq.last_row = static_cast<int32_t>(plan.rows.size());
  if (row.samples) {
    ++seq.pending_outputs;
    Unlist(seq.request.id, SeqState::kPrefilling);
    seq.state = SeqState::kRunning;
    running_.push_back(seq.request.id);
  }
  const bool fork_now = row.samples && !seq.fork_children.empty();
  plan.rows.push_back(std::move(row));
  return fork_now ? n + AddForks(seq, plan) : n;
}

int64_t RankScheduler::AddForks(Sequence& parent, RankStepPlan& plan) {
  const SeqAllocation* source = blocks_.Find(parent.request.id);
  WEIR_CHECK(source != nullptr) << "a planned sequence holds KV";
  const SeqSlot source_slot = source->slot;
  const std::vector<RequestId> children = std::move(parent.fork_children);
  parent.fork_children.clear();
  int64_t forked = 0;
  for (RequestId id : children) {
    auto it = seqs_.find(id);
    if (it == seqs_.end() || it->second.state != SeqState::kWaiting) continue;
    Sequence& child = it->second;
    // One that does not fit now is prefilled on its own later.
    if (static_cast<int64_t>(prefilling_.size() + running_.size()) >= config_.max_running ||
        !CanAdmit(child) ||
        (config_.max_running_per_tenant > 0 &&
         AdmittedOf(child.request.tenant) >= config_.max_running_per_tenant)) {
      continue;
    }
    WEIR_CHECK_OK(blocks_.Allocate(id, child.prefill_len));
    waiting_.erase(std::find(waiting_.begin(), waiting_.end(), id));
    waiting_blocks_ -= BlocksForTokens(config_.kv, child.prefill_len);
    PlanRow row;
    row.request = id;
    row.reset_epoch = child.reset_epoch;
    row.start_pos = child.prefill_len - 1;
    row.input_tokens = {child.tokens[child.prefill_len - 1]};
    row.samples = true;
    row.fork_from = source_slot;
    if (Speculates(child)) row.draft_tokens = 0;
    child.num_scheduled = child.prefill_len;
    AnnounceBlocks(child, row);
    child.last_step = plan.step_id;
    child.last_row = static_cast<int32_t>(plan.rows.size());
    ++child.pending_outputs;
    child.state = SeqState::kRunning;
    running_.push_back(id);
    plan.rows.push_back(std::move(row));
    ++forked;
    ++num_forks_;
  }
  return forked;
}

void RankScheduler::SchedulePrefill(RankStepPlan& plan) {
  int64_t budget = config_.max_prefill_tokens;
  // While prompts are prefilling, the head of the queue (if it could be
  // admitted now) keeps room in this step too — its whole prompt, at most
  // half the budget — so a short request never waits for a long prompt's
  // whole prefill: their chunks share the steps.
  int64_t reserve = 0;
  if (!prefilling_.empty() && !waiting_.empty() &&
      static_cast<int64_t>(prefilling_.size() + running_.size()) < config_.max_running) {
    auto next = NextToAdmit();
    if (next != waiting_.end() && CanAdmit(seqs_.at(*next))) {
      reserve = std::min<int64_t>(seqs_.at(*next).prefill_len, budget / 2);
    }
  }
  // Copy: a chunk that completes a prefill moves the sequence to running_.
  const std::vector<RequestId> prefilling = prefilling_;
  for (RequestId id : prefilling) {
    if (budget - reserve <= 0) break;
    budget -= AddPrefillChunk(seqs_.at(id), budget - reserve, plan);
  }
  while (budget > 0 && !waiting_.empty() &&
         static_cast<int64_t>(prefilling_.size() + running_.size()) < config_.max_running) {
    auto next = NextToAdmit();
    if (next == waiting_.end()) return;  // Every waiting tenant is at its limit.
    Sequence& seq = seqs_.at(*next);
    // The whole prefill is reserved at admission, so a started prefill never
    // waits for blocks; the chosen one is never skipped for another.
    if (!CanAdmit(seq)) return;
    WEIR_CHECK_OK(blocks_.Allocate(seq.request.id, seq.prefill_len));
    waiting_.erase(next);
    waiting_blocks_ -= BlocksForTokens(config_.kv, seq.prefill_len);
    seq.state = SeqState::kPrefilling;
    prefilling_.push_back(seq.request.id);
    budget -= AddPrefillChunk(seq, budget, plan);
  }
}

int64_t RankScheduler::DecodeWidth(const Sequence& seq) const {
  if (!Speculates(seq)) return 1;
  // The sequence never holds more than this many written positions: its
  // last token is not written (max_new_tokens or the context ends it).
  const int64_t end =
      std::min<int64_t>(static_cast<int64_t>(seq.request.prompt.size()) +
                            seq.request.max_new_tokens,
                        config_.max_model_len) -
      1;
  const int64_t room = end - seq.num_scheduled;
  if (room < 1) return 0;
  return 1 + std::min<int64_t>(config_.num_draft_tokens, room - 1);
}

void RankScheduler::AddDecodeRow(Sequence& seq, RankStepPlan& plan) {
  PlanRow row;
  row.request = seq.request.id;
  row.reset_epoch = seq.reset_epoch;
  // Speculating, only a lower bound is known while a row is in flight.
  row.start_pos = Speculates(seq) ? seq.committed_len() - 1 : seq.num_scheduled;
  row.samples = true;
  if (seq.pending_outputs == 0) {
    // (num_scheduled is exact then: the last token received.)
    row.input_tokens.push_back(seq.tokens[seq.num_scheduled]);
  } else {
    // Guaranteed by BuildPlan: only the previous step may be unreturned.
    WEIR_DCHECK(seq.last_step.has_value() && *seq.last_step + 1 == plan.step_id);
    row.remap = seq.last_row;
  }
  const int64_t width = DecodeWidth(seq);
  WEIR_DCHECK(width >= 1);
  if (Speculates(seq)) row.draft_tokens = static_cast<int32_t>(width - 1);
  seq.num_scheduled += width;
  ++seq.pending_outputs;
  AnnounceBlocks(seq, row);
  seq.last_step = plan.step_id;
  seq.last_row = static_cast<int32_t>(plan.rows.size());
  plan.rows.push_back(std::move(row));
}

void RankScheduler::ScheduleDecode(RankStepPlan& plan) {
  starved_.clear();
  // Sequences sure to end by length once their planned outputs arrive get no
  // row: it would be wasted work.
  std::vector<Sequence*> selected;
  for (RequestId id : running_) {
    Sequence& seq = seqs_.at(id);
    if (!EndsByLength(seq, config_.max_model_len)) selected.push_back(&seq);
  }
  if (static_cast<int64_t>(selected.size()) > config_.max_decode_batch) {
    // The most urgent first, then the latest arrivals (LCFS).
    std::sort(selected.begin(), selected.end(), [](const Sequence* a, const Sequence* b) {
      if (a->request.priority != b->request.priority) {
        return a->request.priority < b->request.priority;
      }
      return a->arrival > b->arrival;
    });
    selected.resize(config_.max_decode_batch);
  }
  // Victim order: the least urgent first, then the shortest output, the
  // latest arrival on ties (LCFS).
  auto victim_before = [](const Sequence* a, const Sequence* b) {
    if (a->request.priority != b->request.priority) {
      return a->request.priority > b->request.priority;
    }
    if (a->num_generated() != b->num_generated()) return a->num_generated() < b->num_generated();
    return a->arrival > b->arrival;
  };
  // Rows go to the least likely victims first, so a victim never has a row
  // in this plan already.
  std::sort(selected.begin(), selected.end(),
            [&](const Sequence* a, const Sequence* b) { return victim_before(b, a); });
  for (Sequence* seq : selected) {
    if (seq->state != SeqState::kRunning) continue;  // preempted while growing another
    const RequestId id = seq->request.id;
    // Blocks for the row's worst case (every draft accepted).
    const int64_t width = DecodeWidth(*seq);
    if (width == 0) continue;  // wait for the in-flight row's result
    const int64_t new_len = seq->num_scheduled + width;
    bool runs = true;
    while (!blocks_.CanGrow(id, new_len)) {
      const int64_t shortfall = BlocksForTokens(config_.kv, new_len) -
                                static_cast<int64_t>(blocks_.Find(id)->blocks.size());
      if (blocks_.num_free_blocks() + blocks_.num_pending_release_blocks() >= shortfall) {
        // Enough blocks return once the in-flight step does: wait one step
        // instead of preempting more (zero-overhead stepping only).
        starved_.emplace_back(id, shortfall);
        runs = false;
        break;
      }
      // Victims: admitted sequences (running or prefilling) without a row in
      // this plan; those about to end by length are left to end.
      Sequence* victim = nullptr;
      for (const std::vector<RequestId>* list : {&running_, &prefilling_}) {
        for (RequestId other : *list) {
          Sequence& cand = seqs_.at(other);
          const bool has_row = cand.last_step == plan.step_id;
          if (has_row || EndsByLength(cand, config_.max_model_len)) continue;
          if (victim == nullptr || victim_before(&cand, victim)) victim = &cand;
        }
      }
      WEIR_CHECK(victim != nullptr) << "the growing sequence itself is a candidate";
      Preempt(*victim);
      if (victim == seq) {
        runs = false;
        break;
      }
    }
    if (!runs) continue;
    WEIR_CHECK_OK(blocks_.Grow(id, new_len));
    AddDecodeRow(*seq, plan);
  }
}

}  // namespace weir::coordinator::scheduler
