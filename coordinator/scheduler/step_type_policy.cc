// coordinator/scheduler/step_type_policy.cc

#include "coordinator/scheduler/step_type_policy.h"

#include "absl/strings/str_cat.h"

namespace weir::coordinator::scheduler {

absl::StatusOr<StepTypePolicy> StepTypePolicy::Create(const StepTypePolicyConfig& config) {
  if ((config.enable_all_attempts && config.prefill_attempt_interval < 1) ||
      (config.enable_any_attempts && config.prefill_any_attempt_interval < 1)) {
    return absl::InvalidArgumentError(absl::StrCat("prefill attempt intervals must be >= 1; got ",
                                                   config.prefill_attempt_interval, " and ",
                                                   config.prefill_any_attempt_interval));
  }
  return StepTypePolicy(config);
}

StepType StepTypePolicy::Decide(absl::Span<const RankLoad> ranks) {
  bool any_prefill = false, all_prefill = !ranks.empty(), any_decode = false;
  for (const RankLoad& r : ranks) {
    any_prefill |= r.has_prefill_work;
    all_prefill &= r.has_prefill_work;
    any_decode |= r.has_decode_work;
  }
  bool prefill = false;
  if (!any_decode) {
    prefill = any_prefill;
  } else if (decode_steps_ > 0) {
    const bool all_point =
        config_.enable_all_attempts && decode_steps_ % config_.prefill_attempt_interval == 0;
    const bool any_point =
        config_.enable_any_attempts && decode_steps_ % config_.prefill_any_attempt_interval == 0;
    prefill = (all_point && all_prefill) || (any_point && any_prefill);
  }
  if (prefill) {
    decode_steps_ = 0;
    return StepType::kPrefill;
  }
  if (any_decode) ++decode_steps_;
  return StepType::kDecode;
}

}  // namespace weir::coordinator::scheduler
