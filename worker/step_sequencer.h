// worker/step_sequencer.h
//
// StepSequencer enforces the ordering contract of the Steps stream: plans
// carry the coordinator's epoch (fencing: a plan from an older coordinator
// instance is refused) and step ids that start at 0 and grow by exactly 1.
//
// Thread safety: not thread-safe; owned by the thread serving the stream.

#ifndef WEIR_WORKER_STEP_SEQUENCER_H_
#define WEIR_WORKER_STEP_SEQUENCER_H_

#include <cstdint>

#include "absl/status/status.h"

namespace weir::worker {

class StepSequencer {
 public:
  explicit StepSequencer(uint64_t epoch) : epoch_(epoch) {}

  // Accepts the plan (advancing the expected id) or refuses it: ABORTED for
  // a foreign epoch, FAILED_PRECONDITION for a gap, a repeat or a reorder.
  // A refused plan does not advance the sequence.
  absl::Status Accept(uint64_t epoch, uint64_t step_id);

  uint64_t next_step_id() const { return next_; }

 private:
  const uint64_t epoch_;
  uint64_t next_ = 0;
};

}  // namespace weir::worker

#endif  // WEIR_WORKER_STEP_SEQUENCER_H_
