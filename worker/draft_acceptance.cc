#include "worker/draft_acceptance.h"

#include <limits>

#include "absl/status/status.h"

namespace weir::worker {

sampling::SampleResult SamplePosition(const float* logits, int64_t vocab, const RowSampling& row,
                                      int64_t position, MaskScratch& scratch) {
  sampling::SampleRow sample_row{.logits = logits,
                                 .params = row.params,
                                 .prompt_tokens = row.prompt,
                                 .output_tokens = row.output,
                                 .position = position,
                                 .is_draft = false,
                                 .want_logprob = row.want_logprob};
  if (row.matcher != nullptr && !row.matcher->IsTerminated()) {
    // The constraint decides which tokens may come next.
    grammar::Matcher& matcher = *row.matcher;
    scratch.mask.assign(matcher.grammar().vocab().mask_words(), 0);
    matcher.FillNextTokenBitmask(scratch.mask);
    scratch.logits.assign(vocab, -std::numeric_limits<float>::infinity());
    bool any = false;
    for (int64_t id = 0; id < vocab; ++id) {
      if ((scratch.mask[id / 32] >> (id % 32)) & 1u) {
        scratch.logits[id] = logits[id];
        any = true;
      }
    }
    if (!any) {
      sampling::SampleResult none;
      none.status = absl::InvalidArgumentError(
          "the constraint allows no token here (the vocabulary cannot continue it)");
      return none;
    }
    sample_row.logits = scratch.logits.data();
  }
  return sampling::SampleBatch({&sample_row, 1}, static_cast<int32_t>(vocab))[0];
}

Acceptance AcceptDrafts(const float* logits, int64_t vocab, std::span<const int64_t> drafts,
                        const RowSampling& row, std::vector<int32_t>& output, int64_t position,
                        MaskScratch& scratch, std::span<const sampling::SampleResult> presampled) {
  Acceptance out;
  grammar::Matcher* matcher = row.matcher;
  if (matcher != nullptr && matcher->IsTerminated()) return out;
  for (size_t j = 0; j < drafts.size(); ++j) {
    RowSampling at = row;
    at.output = output;
    const sampling::SampleResult sample =
        j < presampled.size() ? presampled[j]
                              : SamplePosition(logits + j * vocab, vocab, at,
                                               position + static_cast<int64_t>(j), scratch);
    if (!sample.status.ok() || sample.token != drafts[j]) break;
    if (matcher != nullptr) {
      // The mask let the sample in, so the matcher takes it.
      if (!matcher->AcceptToken(sample.token).ok()) break;
      if (matcher->IsTerminated()) {
        // The row's own sample of this position ends the grammar instead.
        matcher->Rollback(1).IgnoreError();
        break;
      }
    }
    output.push_back(sample.token);
    out.logprobs.push_back(sample.logprob);
    ++out.accepted;
  }
  return out;
}

}  // namespace weir::worker
