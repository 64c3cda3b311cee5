#include "worker/sampling/sampling_params.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace weir::worker::sampling {
namespace {

absl::Status Bad(const std::string& field, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat("sampling.", field, ": ", why));
}

}  // namespace

absl::Status ValidateSamplingParams(const SamplingParams& p, const SamplingLimits& limits) {
  if (!std::isfinite(p.temperature) || p.temperature < 0.0f) {
    return Bad("temperature", "must be finite and >= 0");
  }
  if (p.top_k < 0) return Bad("top_k", "must be >= 0");
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) return Bad("top_p", "must be in (0, 1]");
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f)) return Bad("min_p", "must be in [0, 1]");
  if (!std::isfinite(p.repetition_penalty) || p.repetition_penalty <= 0.0f) {
    return Bad("repetition_penalty", "must be finite and > 0");
  }
  if (!(p.frequency_penalty >= -2.0f && p.frequency_penalty <= 2.0f)) {
    return Bad("frequency_penalty", "must be in [-2, 2]");
  }
  if (!(p.presence_penalty >= -2.0f && p.presence_penalty <= 2.0f)) {
    return Bad("presence_penalty", "must be in [-2, 2]");
  }
  if (static_cast<int64_t>(p.logit_bias.size()) > limits.max_logit_bias_entries) {
    return Bad("logit_bias", absl::StrCat(p.logit_bias.size(), " entries; at most ",
                                          limits.max_logit_bias_entries));
  }
  for (const auto& [id, bias] : p.logit_bias) {
    if (id < 0 || id >= limits.vocab_size) {
      return Bad("logit_bias", absl::StrCat("token id ", id, " outside [0, ", limits.vocab_size,
                                            ")"));
    }
    if (!std::isfinite(bias)) return Bad("logit_bias", absl::StrCat("bias of ", id, " not finite"));
  }
  return absl::OkStatus();
}

}  // namespace weir::worker::sampling
