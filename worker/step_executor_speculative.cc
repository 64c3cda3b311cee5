// worker/step_executor_speculative.cc
//
// Speculative decoding in the step executor (DSpark, spec §4.8): which
// drafts a row verifies, the acceptance of a verified block with the rollback
// of its rejected positions, and drafting the next block.
//
// Acceptance is "sample, then compare": position j of the block is sampled
// exactly as a plain row would sample it (same logits, penalties over the
// tokens before it, draw of (seed, position)); the draft is accepted while it
// equals that sample. Greedy rows thus accept the longest prefix equal to the
// target's argmax. Sampled rows stay lossless: DSpark drafts greedily, so the
// draft distribution q is a point mass on the draft d, and speculative
// rejection sampling with such a q (accept d with probability
// min(1, p(d)/q(d)) = p(d); on rejection draw from max(0, p - q) normalized =
// p without d) emits exactly p, as sampling from p and comparing does. With
// the seeded draw a function of (seed, position), the emitted tokens equal
// those of plain decoding.

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/logging.h"
#include "worker/sampling/sampler.h"
#include "worker/step_executor.h"

namespace weir::worker {

absl::Status StepExecutor::SetSpeculation(int32_t num_draft_tokens) {
  const model::ModelConfig& c = model_.config();
  const int64_t rollback = model_.NewSequence()->max_rollback();
  if (num_draft_tokens < 0 || num_draft_tokens > c.dspark_block_size ||
      num_draft_tokens > rollback) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_draft_tokens must be in [0, ", std::min<int64_t>(c.dspark_block_size,
                                                                          rollback),
                     "] (the model's DSpark block and rollback), got ", num_draft_tokens));
  }
  if (num_draft_tokens > 0 && c.n_mtp_layers == 0) {
    return absl::InvalidArgumentError(
        "speculative decoding needs DSpark stages; the model has none");
  }
  num_draft_tokens_ = num_draft_tokens;
  return absl::OkStatus();
}

int64_t StepExecutor::SingleInput(const RowPlan& row) const {
  if (row.tokens.size() + (row.remap >= 0 ? 1 : 0) != 1) return -1;
  if (row.remap < 0) return row.tokens[0];
  if (row.remap >= static_cast<int32_t>(previous_samples_.size())) return -1;
  return previous_samples_[row.remap];
}

int64_t StepExecutor::UsableDrafts(const RowPlan& row, int64_t input) const {
  if (row.draft_tokens <= 0 || row.start_pos == 0 || row.fork_from >= 0 || input < 0) return 0;
  if (row.slot < 0 || row.slot >= max_slots()) return 0;
  const Slot& slot = slots_[row.slot];
  if (slot.state == nullptr || slot.matcher != nullptr || slot.pending_grammar.has_value()) {
    return 0;
  }
  if (input != slot.drafts_after || slot.state->length() != slot.drafts_pos) return 0;
  return std::min<int64_t>(row.draft_tokens, static_cast<int64_t>(slot.drafts.size()));
}

absl::StatusOr<int64_t> StepExecutor::VerifyDrafts(const RowPlan& row, Slot& slot, int64_t start,
                                                   const std::vector<int64_t>& inputs,
                                                   int64_t drafts,
                                                   const std::vector<float>& logits,
                                                   RowOutcome& out) {
  const int64_t vocab = model_.config().vocab_size;
  const int64_t base = static_cast<int64_t>(inputs.size()) - drafts;
  int64_t accepted = 0;
  for (; accepted < drafts; ++accepted) {
    // The logits of the position before draft `accepted` predict it.
    const sampling::SampleRow sample_row{.logits = logits.data() + (base - 1 + accepted) * vocab,
                                         .params = &row.sampling,
                                         .prompt_tokens = slot.prompt,
                                         .output_tokens = slot.output,
                                         .position = start + base + accepted,
                                         .is_draft = false};
    const sampling::SampleResult result =
        sampling::SampleBatch({&sample_row, 1}, static_cast<int32_t>(vocab))[0];
    const int64_t draft = inputs[base + accepted];
    // An error is reported by the row's own sample at this position.
    if (!result.status.ok() || result.token != draft) break;
    slot.output.push_back(static_cast<int32_t>(draft));
    out.accepted.push_back(static_cast<int32_t>(draft));
    out.accepted_logprobs.push_back(result.logprob);
  }
  drafts_verified_ += drafts;
  drafts_accepted_ += accepted;
  if (absl::Status s = slot.state->Rollback(drafts - accepted); !s.ok()) {
    slot.state->MarkBroken();
    out.accepted.clear();
    out.accepted_logprobs.clear();
    return absl::InternalError(absl::StrCat("slot ", row.slot, ": rollback of rejected drafts: ",
                                            s.message()));
  }
  return base + accepted;
}

void StepExecutor::DraftAfter(Slot& slot, int32_t token) {
  slot.drafts.clear();
  slot.drafts_after = -1;
  slot.drafts_pos = -1;
  // A draft needs the features of two forwarded positions (spec §4.8).
  if (num_draft_tokens_ == 0 || slot.state->length() < 2) return;
  absl::StatusOr<model::DraftResult> drafted = model_.Draft(*slot.state, token);
  if (!drafted.ok()) {
    // The next row just verifies nothing.
    WEIR_LOG(WARNING) << "DSpark draft failed: " << drafted.status();
    return;
  }
  slot.drafts.assign(drafted->tokens.begin(), drafted->tokens.begin() + num_draft_tokens_);
  slot.drafts_after = token;
  slot.drafts_pos = slot.state->length();
}

}  // namespace weir::worker
