// worker/sampling/sampling_params.h
//
// SamplingParams: how one sequence turns logits into its next token, and the
// validation every request's parameters pass before they reach a worker.
//
// Thread safety: value type.

#ifndef WEIR_WORKER_SAMPLING_SAMPLING_PARAMS_H_
#define WEIR_WORKER_SAMPLING_SAMPLING_PARAMS_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/status.h"

namespace weir::worker::sampling {

// Logit bias values are clamped to this magnitude.
inline constexpr float kMaxLogitBias = 100.0f;

struct SamplingParams {
  // 0 = greedy (argmax, ties to the lowest id). Otherwise logits are divided
  // by it before the filters.
  float temperature = 1.0f;
  // Keep the k most likely tokens; 0 = off.
  int32_t top_k = 0;
  // Keep the smallest set of most likely tokens whose mass reaches top_p; 1 = off.
  float top_p = 1.0f;
  // Drop tokens whose probability is below min_p x the top probability; 0 = off.
  float min_p = 0.0f;
  // > 1 discourages tokens seen in the prompt or output (logit / p if positive,
  // logit x p if negative); 1 = off.
  float repetition_penalty = 1.0f;
  // Subtracted once per occurrence in the output.
  float frequency_penalty = 0.0f;
  // Subtracted once if the token occurs in the output.
  float presence_penalty = 0.0f;
  // (token id, bias) added to the logit, bias clamped to [-100, 100].
  std::vector<std::pair<int32_t, float>> logit_bias;
  // The sequence's seed. The random draw of a position is a pure function of
  // (seed, position, is_draft): independent of batch composition and row order.
  uint64_t seed = 0;
};

struct SamplingLimits {
  int32_t vocab_size = 0;
  int32_t max_logit_bias_entries = 1024;
};

// Returns INVALID_ARGUMENT naming the field for: temperature < 0 or not
// finite; top_k < 0; top_p outside (0, 1] or NaN; min_p outside [0, 1];
// repetition_penalty <= 0 or not finite; frequency/presence penalties not
// finite or outside [-2, 2]; more logit-bias entries than allowed, a bias id
// outside [0, vocab_size) or a non-finite bias.
absl::Status ValidateSamplingParams(const SamplingParams& params, const SamplingLimits& limits);

}  // namespace weir::worker::sampling

#endif  // WEIR_WORKER_SAMPLING_SAMPLING_PARAMS_H_
