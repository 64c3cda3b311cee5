// worker/step_executor.h
//
// StepExecutor runs the rows of StepPlans on one rank's Model: it owns the
// sequence slots (SequenceState + token history), resolves zero-overhead
// remaps from the previous step's samples, runs the forward, samples, and
// releases slots. Plain C++ in and out; the Worker service converts protos.
//
// Thread safety: not thread-safe; owned by the thread serving the Steps stream.

#ifndef WEIR_WORKER_STEP_EXECUTOR_H_
#define WEIR_WORKER_STEP_EXECUTOR_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/model/model.h"
#include "worker/sampling/sampling_params.h"

namespace weir::worker {

struct RowPlan {
  int32_t slot = -1;
  // 0 starts the slot afresh; otherwise must equal the slot's length.
  int64_t start_pos = 0;
  std::vector<int64_t> tokens;
  // >= 0: append the token that row `remap` of the previous step sampled.
  int32_t remap = -1;
  bool sample = false;
  sampling::SamplingParams sampling;
  int32_t return_top_k = 0;
};

struct RowOutcome {
  std::optional<int32_t> token;
  float logprob = 0.0f;
  std::vector<int32_t> top_ids;
  std::vector<float> top_logits;
  // A per-row failure (the rest of the step is unaffected).
  absl::Status status;
};

class StepExecutor {
 public:
  // Does not take ownership; `model` must outlive the executor.
  // REQUIRES: max_slots >= 1.
  StepExecutor(model::Model& model, int32_t max_slots);

  // Validates every row first (slot in range and used once, positions
  // consistent with the slot, tokens in the vocabulary, remap naming a row of
  // the previous step that sampled, sampling parameters): INVALID_ARGUMENT
  // naming the row, and nothing runs. Then drops the `release` slots, runs
  // the rows in order (a released slot may be reused by a row starting at
  // position 0) and returns one outcome per row.
  absl::StatusOr<std::vector<RowOutcome>> Execute(const std::vector<RowPlan>& rows,
                                                  const std::vector<int32_t>& release);

  int32_t max_slots() const { return static_cast<int32_t>(slots_.size()); }
  // Number of slots holding a sequence.
  int32_t used_slots() const;

 private:
  struct Slot {
    std::unique_ptr<model::SequenceState> state;
    std::vector<int32_t> prompt;  // tokens forwarded before the first sample
    std::vector<int32_t> output;  // sampled tokens fed back as inputs
    bool sampled_once = false;
  };

  absl::Status Validate(const std::vector<RowPlan>& rows,
                        const std::vector<int32_t>& release) const;

  model::Model& model_;
  std::vector<Slot> slots_;
  // Token each row of the previous step sampled (-1 if it did not).
  std::vector<int32_t> previous_samples_;
};

}  // namespace weir::worker

#endif  // WEIR_WORKER_STEP_EXECUTOR_H_
