// worker/step_executor_speculative.cc
//
// Speculative decoding in the step executor (DSpark, spec §4.8): which
// drafts a row verifies, the acceptance of a verified block with the rollback
// of its rejected positions, and drafting the next block.
//
// Acceptance is "sample, then compare" (draft_acceptance.h, where the
// argument for losslessness is): position j of the block is sampled exactly
// as a plain row would sample it (same logits, penalties over the tokens
// before it, draw of (seed, position)); the draft is accepted while it equals
// that sample. Greedy rows thus accept the longest prefix equal to the
// target's argmax. With the seeded draw a function of (seed, position), the
// emitted tokens equal those of plain decoding.
//
// How many drafts a row verifies does not change what it emits, only how
// many tokens it emits: with a cost curve (SetVerifyCostCurve) a row verifies
// the first ChooseVerifyLength of its drafts, the rest are not forwarded, and
// a row whose verifications have not paid for their cost lately stops
// drafting for a while (DraftPacer): its rows then run one position, as plain
// decoding's. With prompt lookup (SetNgramLookup) a row whose last tokens
// repeat earlier ones takes what followed them as its drafts and skips the
// DSpark pass; with lookup alone (SetNgramLookup without SetSpeculation,
// `--speculative=ngram`) a row without a match verifies nothing next step.

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/logging.h"
#include "worker/draft_acceptance.h"
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

absl::Status StepExecutor::SetNgramLookup(int32_t min_match, int32_t tokens, int32_t max_match) {
  if (min_match < 0 || min_match > kMaxNgramMatch) {
    return absl::InvalidArgumentError(absl::StrCat("ngram lookup: the match length must be in [0, ",
                                                   kMaxNgramMatch, "], got ", min_match));
  }
  if (max_match != 0 && (max_match < min_match || max_match > kMaxNgramMatch)) {
    return absl::InvalidArgumentError(
        absl::StrCat("ngram lookup: the longest match length must be 0 or in [", min_match, ", ",
                     kMaxNgramMatch, "], got ", max_match));
  }
  const int64_t most = std::min<int64_t>(kMaxNgramMatch, model_.NewSequence()->max_rollback());
  if (tokens < 0 || tokens > most) {
    return absl::InvalidArgumentError(
        absl::StrCat("ngram lookup: the tokens a lookup proposes must be in [0, ", most,
                     "] (at most 16, and what the sequences can roll back), got ", tokens));
  }
  ngram_lookup_ = min_match;
  ngram_lookup_max_ = std::max(min_match, max_match);
  lookup_tokens_ = tokens;
  return absl::OkStatus();
}

int64_t StepExecutor::SingleInput(const RowPlan& row) const {
  if (row.tokens.size() + (row.remap >= 0 ? 1 : 0) != 1) return -1;
  if (row.remap < 0) return row.tokens[0];
  if (row.remap >= static_cast<int32_t>(previous_samples_.size())) return -1;
  return previous_samples_[row.remap];
}

int64_t StepExecutor::UsableDrafts(const RowPlan& row, int64_t input, int64_t batch) const {
  if (row.draft_tokens <= 0 || row.start_pos == 0 || row.fork_from >= 0 || input < 0) return 0;
  if (row.slot < 0 || row.slot >= max_slots()) return 0;
  const Slot& slot = slots_[row.slot];
  // A constraint still compiling, or failed, gets no drafts.
  if (slot.state == nullptr || slot.pending_grammar.has_value() || !slot.grammar_status.ok()) {
    return 0;
  }
  if (input != slot.drafts_after || slot.state->length() != slot.drafts_pos) return 0;
  const int64_t kept =
      std::min<int64_t>(row.draft_tokens, static_cast<int64_t>(slot.drafts.size()));
  if (!cost_curve_.has_value()) return kept;
  return ChooseVerifyLength(slot.draft_confidence, kept, *cost_curve_, batch);
}

absl::StatusOr<int64_t> StepExecutor::VerifyDrafts(
    const RowPlan& row, Slot& slot, int64_t start, const std::vector<int64_t>& inputs,
    int64_t drafts, int64_t batch, const std::vector<float>& logits, RowOutcome& out,
    std::span<const sampling::SampleResult> presampled) {
  const int64_t vocab = model_.config().vocab_size;
  const int64_t base = static_cast<int64_t>(inputs.size()) - drafts;
  // The logits of the position before each draft predict it.
  const RowSampling sampling_row{.params = &row.sampling,
                                 .prompt = slot.prompt,
                                 .matcher = slot.matcher.get(),
                                 .want_logprob = row.logprobs >= 0};
  // No logits when the backend picked a greedy row's tokens (every sample
  // is presampled then, and nothing below reads them).
  const float* before = logits.empty() ? nullptr : logits.data() + (base - 1) * vocab;
  const Acceptance acceptance =
      AcceptDrafts(before, vocab, std::span<const int64_t>(inputs).subspan(base, drafts),
                   sampling_row, slot.output, start + base, scratch_, presampled);
  const int64_t accepted = acceptance.accepted;
  out.accepted.assign(inputs.begin() + base, inputs.begin() + base + accepted);
  out.accepted_logprobs = acceptance.logprobs;
  if (slot.matcher != nullptr) slot.accepted_upto = start + base + accepted;
  if (row.logprobs >= 0) {
    // As a plain row scores its sample: the model's distribution, unmasked.
    const int32_t k = static_cast<int32_t>(std::min<int64_t>(row.logprobs, vocab));
    for (int64_t j = 0; j < accepted; ++j) {
      out.accepted_scored.push_back(ScoreToken(logits.data() + (base - 1 + j) * vocab, vocab,
                                               out.accepted[j], k));
    }
  }
  out.verified_drafts = drafts;
  drafts_verified_ += drafts;
  drafts_accepted_ += accepted;
  if (cost_curve_.has_value() && !slot.drafts_from_lookup) {
    slot.pacer.Observe(drafts, accepted, *cost_curve_, batch);
  }
  absl::Status rolled = slot.state->Rollback(drafts - accepted);
  // A sequence on a drafting backend: the host state only counts positions
  // there; the backend undoes its own.
  if (rolled.ok() && slot.on_device) rolled = device_->Rollback(row.slot, slot.state->length());
  if (absl::Status s = rolled; !s.ok()) {
    slot.state->MarkBroken();
    out.accepted.clear();
    out.accepted_logprobs.clear();
    out.accepted_scored.clear();
    return absl::InternalError(absl::StrCat("slot ", row.slot, ": rollback of rejected drafts: ",
                                            s.message()));
  }
  return base + accepted;
}

std::vector<int64_t> StepExecutor::AllowedDrafts(grammar::Matcher& matcher,
                                                 const model::DraftResult& drafted) {
  const int64_t vocab = model_.config().vocab_size;
  std::vector<int64_t> out;
  int advanced = 0;
  for (int32_t i = 0; i < num_draft_tokens_ && !matcher.IsTerminated(); ++i) {
    scratch_.mask.assign(matcher.grammar().vocab().mask_words(), 0);
    matcher.FillNextTokenBitmask(scratch_.mask);
    auto allowed = [&](int64_t id) { return (scratch_.mask[id / 32] >> (id % 32)) & 1u; };
    int64_t pick = drafted.tokens[i];
    if (!allowed(pick)) {
      // The most likely allowed token under the draft's logits (the Markov
      // head's bias there assumed the unmasked draft before it).
      if (static_cast<int64_t>(drafted.logits.size()) < (i + 1) * vocab) break;  // none kept
      const float* logits = drafted.logits.data() + i * vocab;
      pick = -1;
      for (int64_t id = 0; id < vocab; ++id) {
        if (allowed(id) && (pick < 0 || logits[id] > logits[pick])) pick = id;
      }
    }
    if (pick < 0 || !matcher.AcceptToken(static_cast<int32_t>(pick)).ok()) break;
    ++advanced;
    // A draft that ends the grammar is never accepted (AcceptDrafts).
    if (matcher.IsTerminated()) break;
    out.push_back(pick);
  }
  if (absl::Status s = matcher.Rollback(advanced); !s.ok()) {
    WEIR_LOG(ERROR) << "grammar rollback after drafting: " << s;
  }
  return out;
}

std::vector<int64_t> StepExecutor::AllowedPrefix(grammar::Matcher& matcher,
                                                 std::span<const int64_t> tokens) {
  std::vector<int64_t> out;
  int advanced = 0;
  for (const int64_t token : tokens) {
    if (matcher.IsTerminated()) break;
    scratch_.mask.assign(matcher.grammar().vocab().mask_words(), 0);
    matcher.FillNextTokenBitmask(scratch_.mask);
    if (token < 0 || token / 32 >= static_cast<int64_t>(scratch_.mask.size()) ||
        !((scratch_.mask[token / 32] >> (token % 32)) & 1u)) {
      break;
    }
    if (!matcher.AcceptToken(static_cast<int32_t>(token)).ok()) break;
    ++advanced;
    if (matcher.IsTerminated()) break;  // never accepted (AcceptDrafts)
    out.push_back(token);
  }
  if (absl::Status s = matcher.Rollback(advanced); !s.ok()) {
    WEIR_LOG(ERROR) << "grammar rollback after a lookup: " << s;
  }
  return out;
}

void StepExecutor::DraftAfter(std::span<const DraftRequest> requests) {
  std::vector<const DraftRequest*> drafting;
  std::vector<const model::SequenceState*> states;
  std::vector<int64_t> tokens;
  // A step of more speculative rows than the limit drafts for none of them.
  const bool over_limit =
      speculation_max_batch_ > 0 && static_cast<int64_t>(requests.size()) > speculation_max_batch_;
  for (const DraftRequest& request : requests) {
    Slot& slot = slots_[request.slot];
    slot.drafts.clear();
    slot.draft_confidence.clear();
    slot.drafts_after = -1;
    slot.drafts_pos = -1;
    slot.paused_drafting = false;
    slot.drafts_from_lookup = false;
    if (max_draft_tokens() == 0) continue;
    // Over the batch limit nothing drafts (the pacers are left as they were).
    if (over_limit) {
      ++drafts_paused_;
      slot.paused_drafting = true;
      continue;
    }
    // Prompt lookup: a repeated n-gram's continuation instead of a draft pass.
    // It costs no pass, so the pacer (which weighs DSpark's drafts against
    // their pass) neither stops it nor learns from it; how many of its
    // drafts a row verifies is ChooseVerifyLength's choice, as for any, from
    // confidences by how far the match reaches (LookupDraftConfidence).
    if (ngram_lookup_ > 0) {
      int extent = 0;
      std::vector<int64_t> proposal = slot.lookup.Propose(
          slot.prompt, slot.output, request.token, ngram_lookup_,
          lookup_tokens_ > 0 ? lookup_tokens_ : num_draft_tokens_, ngram_lookup_max_, &extent);
      if (!proposal.empty() && slot.matcher != nullptr) {
        proposal = AllowedPrefix(*slot.matcher, proposal);
      }
      if (!proposal.empty()) {
        slot.drafts = std::move(proposal);
        slot.draft_confidence.clear();
        for (size_t j = 0; j < slot.drafts.size(); ++j) {
          slot.draft_confidence.push_back(LookupDraftConfidence(extent, static_cast<int>(j)));
        }
        slot.drafts_after = request.token;
        slot.drafts_pos = slot.state->length();
        slot.drafts_from_lookup = true;
        ++lookup_drafts_;
        continue;
      }
    }
    // Lookup alone (no DSpark drafts): no match, nothing to verify. A DSpark
    // draft needs the features of two forwarded positions (spec §4.8).
    if (num_draft_tokens_ == 0 || slot.state->length() < 2) continue;
    // DSpark drafts that have not paid for their pass lately: decode plainly
    // a while.
    if (cost_curve_.has_value() && !slot.pacer.ShouldDraft()) {
      ++drafts_paused_;
      slot.paused_drafting = true;
      continue;
    }
    drafting.push_back(&request);
    states.push_back(slot.state.get());
    tokens.push_back(request.token);
  }
  if (drafting.empty()) return;
  // The model drafts for the sequences it holds, a drafting backend for
  // those it holds (their DSpark rings live there).
  std::vector<absl::StatusOr<model::DraftResult>> drafted(drafting.size(),
                                                          absl::InternalError("not drafted"));
  std::vector<size_t> on_model, on_backend;
  for (size_t i = 0; i < drafting.size(); ++i) {
    (slots_[drafting[i]->slot].on_device ? on_backend : on_model).push_back(i);
  }
  if (!on_model.empty()) {
    std::vector<const model::SequenceState*> model_states;
    std::vector<int64_t> model_tokens;
    for (size_t i : on_model) {
      model_states.push_back(states[i]);
      model_tokens.push_back(tokens[i]);
    }
    std::vector<absl::StatusOr<model::DraftResult>> got =
        model_.DraftBatch(model_states, model_tokens);
    for (size_t j = 0; j < on_model.size(); ++j) drafted[on_model[j]] = std::move(got[j]);
  }
  if (!on_backend.empty()) {
    std::vector<int> backend_slots;
    std::vector<int64_t> backend_tokens;
    for (size_t i : on_backend) {
      backend_slots.push_back(drafting[i]->slot);
      backend_tokens.push_back(tokens[i]);
    }
    // The draft logits only serve a grammar's substitutes (AllowedDrafts).
    bool with_logits = false;
    for (size_t i : on_backend) with_logits |= slots_[drafting[i]->slot].matcher != nullptr;
    std::vector<absl::StatusOr<model::DraftResult>> got =
        device_->DraftBatch(backend_slots, backend_tokens, with_logits);
    for (size_t j = 0; j < on_backend.size() && j < got.size(); ++j) {
      drafted[on_backend[j]] = std::move(got[j]);
    }
  }
  for (size_t i = 0; i < drafting.size(); ++i) {
    if (!drafted[i].ok()) {
      // The next row just verifies nothing.
      WEIR_LOG(WARNING) << "DSpark draft failed: " << drafted[i].status();
      continue;
    }
    Slot& slot = slots_[drafting[i]->slot];
    if (slot.matcher != nullptr) {
      slot.drafts = AllowedDrafts(*slot.matcher, *drafted[i]);
    } else {
      slot.drafts.assign(drafted[i]->tokens.begin(),
                         drafted[i]->tokens.begin() + num_draft_tokens_);
    }
    // A grammar's substitute for a draft keeps the confidence of the draft it
    // replaced (an estimate: the head scored DSpark's own token).
    slot.draft_confidence.assign(drafted[i]->confidence.begin(),
                                 drafted[i]->confidence.begin() + slot.drafts.size());
    slot.drafts_after = drafting[i]->token;
    slot.drafts_pos = slot.state->length();
    ++dspark_drafts_;
  }
}

}  // namespace weir::worker
