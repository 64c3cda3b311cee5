#include "worker/step_executor.h"

#include <algorithm>
#include <numeric>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "worker/sampling/sampler.h"

namespace weir::worker {
namespace {

absl::Status RowError(size_t row, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat("step row ", row, ": ", why));
}

}  // namespace

StepExecutor::StepExecutor(model::Model& model, int32_t max_slots)
    : model_(model), slots_(max_slots) {}

int32_t StepExecutor::used_slots() const {
  return static_cast<int32_t>(std::count_if(slots_.begin(), slots_.end(),
                                            [](const Slot& s) { return s.state != nullptr; }));
}

absl::Status StepExecutor::Validate(const std::vector<RowPlan>& rows,
                                    const std::vector<int32_t>& release) const {
  const int64_t vocab = model_.config().vocab_size;
  for (int32_t slot : release) {
    if (slot < 0 || slot >= max_slots()) {
      return absl::InvalidArgumentError(absl::StrCat("release of slot ", slot, " outside [0, ",
                                                     max_slots(), ")"));
    }
  }
  const absl::flat_hash_set<int32_t> released(release.begin(), release.end());
  absl::flat_hash_set<int32_t> used;
  for (size_t i = 0; i < rows.size(); ++i) {
    const RowPlan& row = rows[i];
    if (row.slot < 0 || row.slot >= max_slots()) {
      return RowError(i, absl::StrCat("slot ", row.slot, " outside [0, ", max_slots(), ")"));
    }
    if (!used.insert(row.slot).second) {
      return RowError(i, absl::StrCat("slot ", row.slot, " appears twice"));
    }
    const Slot& slot = slots_[row.slot];
    const int64_t length =
        slot.state == nullptr || released.contains(row.slot) ? 0 : slot.state->length();
    if (row.start_pos != 0 && row.start_pos != length) {
      return RowError(i, absl::StrCat("start_pos ", row.start_pos, " but slot ", row.slot,
                                      " holds ", length, " positions"));
    }
    if (row.tokens.empty() && row.remap < 0) return RowError(i, "no input tokens");
    for (int64_t t : row.tokens) {
      if (t < 0 || t >= vocab) {
        return RowError(i, absl::StrCat("token ", t, " outside [0, ", vocab, ")"));
      }
    }
    if (row.remap >= 0 && (row.remap >= static_cast<int32_t>(previous_samples_.size()) ||
                           previous_samples_[row.remap] < 0)) {
      return RowError(i, absl::StrCat("remap to row ", row.remap,
                                      " which did not sample in the previous step"));
    }
    if (row.return_top_k < 0 || row.return_top_k > vocab) {
      return RowError(i, absl::StrCat("return_top_k ", row.return_top_k, " out of range"));
    }
    sampling::SamplingLimits limits{.vocab_size = static_cast<int32_t>(vocab)};
    if (absl::Status s = sampling::ValidateSamplingParams(row.sampling, limits); !s.ok()) {
      return RowError(i, std::string(s.message()));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<RowOutcome>> StepExecutor::Execute(
    const std::vector<RowPlan>& rows, const std::vector<int32_t>& release) {
  if (absl::Status s = Validate(rows, release); !s.ok()) {
    // An expert-parallel step is a collective: join it with no rows so the
    // other ranks are not left waiting, then report the bad plan.
    model_.ForwardBatch({}, {}, {}).IgnoreError();
    return s;
  }
  const int64_t vocab = model_.config().vocab_size;
  std::vector<RowOutcome> outcomes(rows.size());
  std::vector<int32_t> samples(rows.size(), -1);
  // Releases come first: a slot freed by this plan may be reused by its rows.
  for (int32_t slot : release) slots_[slot] = Slot{};
  std::vector<std::vector<int64_t>> inputs(rows.size());
  std::vector<model::SequenceState*> states;
  std::vector<std::span<const int64_t>> tokens;
  std::vector<int64_t> starts;
  for (size_t i = 0; i < rows.size(); ++i) {
    const RowPlan& row = rows[i];
    Slot& slot = slots_[row.slot];
    if (row.start_pos == 0) slot = Slot{.state = model_.NewSequence()};
    inputs[i] = row.tokens;
    if (row.remap >= 0) inputs[i].push_back(previous_samples_[row.remap]);
    states.push_back(slot.state.get());
    tokens.emplace_back(inputs[i]);
    starts.push_back(slot.state->length());
  }
  // One batched forward for every row: each MoE layer runs once per step.
  absl::StatusOr<std::vector<std::vector<float>>> logits =
      model_.ForwardBatch(states, tokens, starts);
  if (!logits.ok()) return logits.status();
  for (size_t i = 0; i < rows.size(); ++i) {
    const RowPlan& row = rows[i];
    Slot& slot = slots_[row.slot];
    for (int64_t t : inputs[i]) {
      (slot.sampled_once ? slot.output : slot.prompt).push_back(static_cast<int32_t>(t));
    }
    const float* last = (*logits)[i].data() + (inputs[i].size() - 1) * vocab;
    RowOutcome& out = outcomes[i];
    if (row.return_top_k > 0) {
      std::vector<int32_t> order(vocab);
      std::iota(order.begin(), order.end(), 0);
      std::partial_sort(order.begin(), order.begin() + row.return_top_k, order.end(),
                        [last](int32_t a, int32_t b) {
                          return last[a] > last[b] || (last[a] == last[b] && a < b);
                        });
      for (int k = 0; k < row.return_top_k; ++k) {
        out.top_ids.push_back(order[k]);
        out.top_logits.push_back(last[order[k]]);
      }
    }
    if (!row.sample) continue;
    sampling::SampleRow sample_row{.logits = last,
                                   .params = &row.sampling,
                                   .prompt_tokens = slot.prompt,
                                   .output_tokens = slot.output,
                                   .position = slot.state->length(),
                                   .is_draft = false};
    sampling::SampleResult result =
        sampling::SampleBatch({&sample_row, 1}, static_cast<int32_t>(vocab))[0];
    out.status = result.status;
    if (result.status.ok()) {
      out.token = result.token;
      out.logprob = result.logprob;
      samples[i] = result.token;
      slot.sampled_once = true;
    }
  }
  previous_samples_ = std::move(samples);
  return outcomes;
}

}  // namespace weir::worker
