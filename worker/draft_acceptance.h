// worker/draft_acceptance.h
//
// How a speculative row turns its verify forward into tokens: one position is
// sampled exactly as a plain row samples it (SamplePosition: the row's
// parameters, penalties over its history, the grammar's mask, the draw of
// (seed, position)), and a draft is accepted while it equals that sample
// (AcceptDrafts, "sample, then compare"). The step executor runs every sample
// through these functions; draft_acceptance_test checks on fixed logits that
// the emitted tokens follow the target's distribution (chi-square over 20,000
// seeds), and that a biased acceptor fails that check.
//
// Why this is speculative rejection sampling: DSpark drafts greedily, so the
// draft distribution q is a point mass on the draft d. Rejection sampling
// accepts d with probability min(1, p(d)/q(d)) = p(d) and otherwise draws from
// max(0, p - q) normalized, i.e. p restricted to the tokens other than d.
// Sampling x ~ p and accepting d iff x == d does the same: d is emitted with
// probability p(d), and on rejection x is distributed as p given x != d. Each
// accepted draft becomes the input of the next verified position, so by
// induction every position is drawn from the target given the tokens before.
//
// Thread safety: stateless functions over caller-owned data.

#ifndef WEIR_WORKER_DRAFT_ACCEPTANCE_H_
#define WEIR_WORKER_DRAFT_ACCEPTANCE_H_

#include <cstdint>
#include <span>
#include <vector>

#include "absl/types/span.h"
#include "grammar/matcher.h"
#include "worker/sampling/sampler.h"
#include "worker/sampling/sampling_params.h"

namespace weir::worker {

// One row's sampling inputs besides the logits. Not owned; must outlive the
// calls that use it.
struct RowSampling {
  // REQUIRES: validated (sampling::ValidateSamplingParams).
  const sampling::SamplingParams* params = nullptr;
  // The tokens before the row's positions: the prompt (repetition penalty)
  // and the output so far (all penalties).
  absl::Span<const int32_t> prompt;
  absl::Span<const int32_t> output;
  // The slot's grammar, or null (unconstrained). SamplePosition masks by its
  // allowed next tokens unless it has terminated.
  grammar::Matcher* matcher = nullptr;
  // SampleResult::logprob computed (sampling::SampleRow::want_logprob).
  bool want_logprob = true;
};

// Scratch space of SamplePosition (the mask and the masked logits), reused
// across calls to avoid allocations.
struct MaskScratch {
  std::vector<uint32_t> mask;
  std::vector<float> logits;
};

// Samples the token at `position` from `logits` [vocab] as a plain row does:
// with `row.matcher` (not terminated), the tokens it forbids get -inf first.
// Does not advance the matcher. The result's status is INVALID_ARGUMENT when
// the grammar allows no token, else the sampler's (sampling::SampleBatch).
sampling::SampleResult SamplePosition(const float* logits, int64_t vocab, const RowSampling& row,
                                      int64_t position, MaskScratch& scratch);

struct Acceptance {
  // Drafts accepted: the first `accepted` of them, in order.
  int64_t accepted = 0;
  // [accepted] the sampler's log-probability of each accepted draft
  // (SampleResult::logprob; 0 unless row.want_logprob).
  std::vector<float> logprobs;
};

// Verifies `drafts` [k] against `logits` [k, vocab], whose row j predicts the
// position of drafts[j], `position` + j: drafts[j] is accepted while it
// equals SamplePosition of row j, given the drafts accepted before it. The
// history is `output` (`row.output` is not read): each accepted draft is
// appended to it, and accepted by `row.matcher` if set. A draft the grammar would end on (the
// matcher terminates after it) is not accepted: the row's own sample of that position, the same
// token, emits it and reports the end. A sampling error rejects the draft (the row's own sample of
// that position reports it). After the call, the row samples position `position` + accepted itself
// from row `accepted` of its verify logits (SamplePosition, `output` as history). `presampled`
// (empty, or at least [k]): the samples of the k positions made beforehand, for a row whose samples
// do not depend on the history (no grammar, no penalty over the output): taken instead of sampling
// again.
Acceptance AcceptDrafts(const float* logits, int64_t vocab, std::span<const int64_t> drafts,
                        const RowSampling& row, std::vector<int32_t>& output, int64_t position,
                        MaskScratch& scratch,
                        std::span<const sampling::SampleResult> presampled = {});

}  // namespace weir::worker

#endif  // WEIR_WORKER_DRAFT_ACCEPTANCE_H_
