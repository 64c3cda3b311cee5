// coordinator/scheduler/fake_worker.cc

#include "coordinator/scheduler/fake_worker.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace weir::coordinator::scheduler {

uint64_t FakeModel::Absorb(uint64_t hash, uint32_t token) {
  uint64_t x = (hash ^ (token + 0x9e3779b97f4a7c15ull)) * 0xbf58476d1ce4e5b9ull;
  return x ^ (x >> 31);
}

uint32_t FakeModel::Next(uint64_t hash, int64_t pos) const {
  uint64_t x = (hash + static_cast<uint64_t>(pos) * 0x94d049bb133111ebull) * 0xff51afd7ed558ccdull;
  x ^= x >> 29;
  return static_cast<uint32_t>(x % vocab);
}

std::vector<uint32_t> ReferenceOutput(const FakeModel& model, const SeqRequest& request,
                                      absl::Span<const uint32_t> eos_token_ids,
                                      int64_t max_model_len, FinishReason* reason) {
  uint64_t hash = 0;
  for (uint32_t t : request.prompt) hash = FakeModel::Absorb(hash, t);
  int64_t len = static_cast<int64_t>(request.prompt.size());
  std::vector<uint32_t> out;
  auto contains = [](absl::Span<const uint32_t> ids, uint32_t t) {
    return std::find(ids.begin(), ids.end(), t) != ids.end();
  };
  while (true) {
    const uint32_t token = model.Next(hash, len - 1);
    out.push_back(token);
    hash = FakeModel::Absorb(hash, token);
    ++len;
    const int64_t n = static_cast<int64_t>(out.size());
    if (n >= request.min_new_tokens) {
      if (!request.ignore_eos && contains(eos_token_ids, token)) {
        *reason = FinishReason::kEos;
        return out;
      }
      if (contains(request.stop_token_ids, token)) {
        *reason = FinishReason::kStopToken;
        return out;
      }
    }
    if (n >= request.max_new_tokens) {
      *reason = FinishReason::kMaxTokens;
      return out;
    }
    if (len >= max_model_len) {
      *reason = FinishReason::kContextLimit;
      return out;
    }
  }
}

absl::StatusOr<RankStepResult> FakeWorker::Execute(const RankStepPlan& plan) {
  auto fail = [&](auto&&... parts) {
    return absl::InternalError(absl::StrCat("step ", plan.step_id, ": ", parts...));
  };
  if (last_step_.has_value() && plan.step_id != *last_step_ + 1) {
    return fail("follows step ", *last_step_);
  }
  last_step_ = plan.step_id;
  for (SeqSlot s : plan.release_slots) {
    auto it = slots_.find(s.value());
    if (it == slots_.end()) continue;
    for (BlockId b : it->second.blocks) block_owner_.erase(b.value());
    slots_.erase(it);
  }
  RankStepResult result;
  result.step_id = plan.step_id;
  std::vector<uint32_t> outputs(plan.rows.size(), 0);
  for (size_t i = 0; i < plan.rows.size(); ++i) {
    const PlanRow& row = plan.rows[i];
    Slot& slot = slots_[row.slot.value()];
    if (slot.written == 0 && slot.blocks.empty()) {
      slot.request = row.request;
      slot.epoch = row.reset_epoch;
    } else if (slot.request != row.request || slot.epoch != row.reset_epoch) {
      return fail("slot ", row.slot.value(), " holds request ", slot.request.value(), " epoch ",
                  slot.epoch, "; row is for ", row.request.value(), " epoch ", row.reset_epoch);
    }
    // A speculative remap row's start is a lower bound (the accepted count
    // of the row before is known only here).
    const bool at_least = row.draft_tokens >= 0 && row.remap >= 0;
    if (at_least ? row.start_pos > slot.written : row.start_pos != slot.written) {
      return fail("row ", i, " starts at ", row.start_pos, "; slot wrote ", slot.written);
    }
    std::vector<uint32_t> inputs = row.input_tokens;
    if (row.remap >= 0) {
      if (!inputs.empty() || row.remap >= static_cast<int32_t>(prev_outputs_.size()) ||
          !prev_samples_[row.remap]) {
        return fail("row ", i, " remaps to row ", row.remap, " of the previous step");
      }
      inputs = {prev_outputs_[row.remap]};
    }
    if (inputs.empty()) return fail("row ", i, " has no input");
    for (BlockId b : row.new_blocks) {
      if (!block_owner_.emplace(b.value(), row.slot.value()).second) {
        return fail("block ", b.value(), " given to slot ", row.slot.value(),
                    " is still held by slot ", block_owner_[b.value()]);
      }
      slot.blocks.push_back(b);
    }
    // A speculative row verifies draft_tokens drafts: they are written (and
    // must be covered) before the rejected ones are rolled back.
    const int64_t drafts = std::max(0, row.draft_tokens);
    slot.written += static_cast<int64_t>(inputs.size());
    if (BlocksForTokens(layout_, slot.written + drafts) > static_cast<int64_t>(slot.blocks.size())) {
      return fail("slot ", row.slot.value(), " wrote ", slot.written + drafts,
                  " positions into ", slot.blocks.size(), " blocks");
    }
    for (uint32_t t : inputs) slot.hash = FakeModel::Absorb(slot.hash, t);
    std::vector<uint32_t> emitted = {model_.Next(slot.hash, slot.written - 1)};
    // Accepted drafts (a pseudo-random 0..drafts): each was the model's next
    // token, so it is written and the following one emitted.
    for (int64_t a = static_cast<int64_t>(slot.hash % (drafts + 1)); a > 0; --a) {
      slot.hash = FakeModel::Absorb(slot.hash, emitted.back());
      ++slot.written;
      emitted.push_back(model_.Next(slot.hash, slot.written - 1));
    }
    outputs[i] = emitted.back();
    // It verifies every draft it may (a fixed verify length).
    result.rows.push_back({row.samples ? emitted : std::vector<uint32_t>{}, false,
                           static_cast<int32_t>(drafts)});
    ++rows_executed_;
  }
  prev_outputs_ = std::move(outputs);
  prev_samples_.clear();
  for (const PlanRow& row : plan.rows) prev_samples_.push_back(row.samples);
  return result;
}

}  // namespace weir::coordinator::scheduler
