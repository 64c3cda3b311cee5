// worker/sampling/sampler.h
//
// The batched CPU sampler: turns one logits row per sequence into its next
// token under that sequence's SamplingParams. It is the reference the GPU
// sampler is tested against.
//
// Order of operations per row: logit bias -> repetition, frequency and
// presence penalties -> (greedy: argmax) -> temperature -> top-k -> top-p ->
// min-p -> one draw by inverse CDF over the kept tokens, sorted by descending
// logit (ties: lower id first).
//
// Determinism: the draw of a row is DrawUniform(seed, position, is_draft), so
// a sequence samples the same token alone or in any batch, in any row order.
//
// Cost: a greedy row without bias or penalties reads its logits once (no
// copy); penalties cost a copy and, for the output-count ones, a pass over
// the output; a sampled row sorts its candidates (all of the vocabulary
// without top-k); the logprob is one more pass with an exp a token, only when
// asked (sampler_bench).
//
// Thread safety: SampleBatch may run concurrently on distinct data (one batch
// at a time uses the sampler threads); SetSamplerThreads any time.

#ifndef WEIR_WORKER_SAMPLING_SAMPLER_H_
#define WEIR_WORKER_SAMPLING_SAMPLER_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "worker/sampling/sampling_params.h"

namespace weir::worker::sampling {

struct SampleRow {
  // [vocab_size] logits of this row. Not owned; must outlive the call.
  const float* logits = nullptr;
  // Not owned; must outlive the call. REQUIRES: validated.
  const SamplingParams* params = nullptr;
  // Tokens of the prompt (repetition penalty only) and of the output so far
  // (repetition, frequency and presence penalties).
  absl::Span<const int32_t> prompt_tokens;
  absl::Span<const int32_t> output_tokens;
  // Position of the token being sampled; with is_draft, the draw's identity.
  int64_t position = 0;
  bool is_draft = false;
  // Compute SampleResult::logprob (a pass over the row with an exp a token);
  // false leaves it 0. The token does not depend on it.
  bool want_logprob = true;
};

struct SampleResult {
  // The sampled id, or -1 when status is not OK.
  int32_t token = -1;
  // log-probability of `token` after bias, penalties and temperature (before
  // the top-k/top-p/min-p filters); for greedy rows, at temperature 1. 0
  // unless SampleRow::want_logprob.
  float logprob = 0.0f;
  // INTERNAL with "NUMERICAL_ERROR" for NaN/+Inf logits; INVALID_ARGUMENT for
  // a row without logits or params, or where every token is masked (-inf).
  absl::Status status;
};

// SampleResult::status of a row with NaN or +Inf logits, and of one whose
// every token is masked (-Inf), for greedy choices made elsewhere (a decode
// backend that picks on its GPU) to report as the sampler does.
absl::Status NonFiniteLogitsError();
absl::Status EveryTokenMaskedError();

// Whether a row's sample depends on the tokens before it (the repetition,
// frequency or presence penalty; SampleRow's prompt / output tokens are read
// only then).
bool UsesHistory(const SamplingParams& params);

// Samples every row independently; an error in one row never affects the
// others. A batch of at least 2^19 logits is split over the sampler threads
// (SetSamplerThreads), each row sampled by one thread exactly as alone; a
// batch that finds them busy with another caller's runs on its caller.
// REQUIRES: vocab_size >= 1.
std::vector<SampleResult> SampleBatch(absl::Span<const SampleRow> rows, int32_t vocab_size);

// The threads SampleBatch splits large batches over, besides its caller:
// -1 = automatic (half the machine's hardware threads less one, at most 8;
// the default), 0 = none. Replaces the set (a batch running on the old one
// finishes there). INVALID_ARGUMENT outside [-1, 256].
absl::Status SetSamplerThreads(int threads);
int SamplerThreadCount();

// The uniform draw in [0, 1) of (seed, position, is_draft): a SplitMix64
// mix of the three, 53 bits of mantissa.
double DrawUniform(uint64_t seed, int64_t position, bool is_draft);

}  // namespace weir::worker::sampling

#endif  // WEIR_WORKER_SAMPLING_SAMPLER_H_
