#include "worker/step_sequencer.h"

#include "absl/strings/str_cat.h"

namespace weir::worker {

absl::Status StepSequencer::Accept(uint64_t epoch, uint64_t step_id) {
  if (epoch != epoch_) {
    return absl::AbortedError(absl::StrCat("step ", step_id, " comes from coordinator epoch ",
                                           epoch, "; this worker serves epoch ", epoch_));
  }
  if (step_id != next_) {
    return absl::FailedPreconditionError(
        absl::StrCat("step ", step_id, " out of order; expected step ", next_));
  }
  ++next_;
  return absl::OkStatus();
}

}  // namespace weir::worker
