// coordinator/scheduler/step_type_policy.h
//
// StepTypePolicy: the vote that makes every rank of a group run the same
// step type. Decode runs by default; prefill is attempted at fixed points
// counted in decode steps since the last prefill step:
//   ALL points (every prefill_attempt_interval decode steps): prefill only if
//       every rank has prefill work (no rank idles through the step);
//   ANY points (every prefill_any_attempt_interval decode steps): prefill if
//       any rank has prefill work (bounds the wait of an isolated rank).
// When no rank is decoding, prefill runs whenever any rank has work.
//
// Thread safety: not thread-safe; one owner (the step-loop thread).

#ifndef WEIR_COORDINATOR_SCHEDULER_STEP_TYPE_POLICY_H_
#define WEIR_COORDINATOR_SCHEDULER_STEP_TYPE_POLICY_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "coordinator/scheduler/step_plan.h"

namespace weir::coordinator::scheduler {

struct StepTypePolicyConfig {
  int32_t prefill_attempt_interval = 70;
  int32_t prefill_any_attempt_interval = 100;
  // Turn the ALL / ANY attempt points on or off. With both off, a prefill
  // runs only when no rank is decoding.
  bool enable_all_attempts = true;
  bool enable_any_attempts = true;
};

class StepTypePolicy {
 public:
  // INVALID_ARGUMENT if an enabled interval is < 1.
  static absl::StatusOr<StepTypePolicy> Create(const StepTypePolicyConfig& config);

  // Returns the type of the next step from every rank's load [num_ranks],
  // and counts it: a decode step advances the attempt counter, a prefill
  // step resets it. Returns kDecode when no rank has any work.
  StepType Decide(absl::Span<const RankLoad> ranks);

  // Decode steps since the last prefill step (or since creation).
  int64_t decode_steps_since_prefill() const { return decode_steps_; }

 private:
  explicit StepTypePolicy(const StepTypePolicyConfig& config) : config_(config) {}

  StepTypePolicyConfig config_;
  int64_t decode_steps_ = 0;
};

}  // namespace weir::coordinator::scheduler

#endif  // WEIR_COORDINATOR_SCHEDULER_STEP_TYPE_POLICY_H_
