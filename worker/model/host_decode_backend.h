// worker/model/host_decode_backend.h
//
// HostDecodeBackend: a DecodeBackend that decodes with the Model itself, on
// copies of the imported SequenceStates (one per slot), through
// Model::ForwardBatch. Its logits are therefore the model's, so an executor
// using it must give exactly the outcomes of an executor without one: the
// CPU test of the executor's import / export / batching logic, which on a
// GPU machine runs against DeviceDecoder. `fail_next_step()` makes the next
// Step fail with INTERNAL (and drop its slots, as a device failure does).
// Over an expert-parallel model it can be made collective (as DeviceDecoder
// is with a communicator of several ranks): every Step, empty, refused and
// failed ones included, then runs the model's ForwardBatch, itself a
// collective of the group.
//
// Thread safety: not thread-safe (one executor).

#ifndef WEIR_WORKER_MODEL_HOST_DECODE_BACKEND_H_
#define WEIR_WORKER_MODEL_HOST_DECODE_BACKEND_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "worker/model/decode_backend.h"
#include "worker/model/model.h"

namespace weir::model {

struct HostDecodeBackendStats {
  int64_t imports = 0;
  int64_t exports = 0;
  int64_t steps = 0;
  int64_t rows = 0;
  int64_t starts = 0;
};

class HostDecodeBackend : public DecodeBackend {
 public:
  // REQUIRES: `model` outlives the backend; max_sequences, max_batch >= 1;
  // `collective` only over an expert-parallel model.
  // max_rows_per_slot > 1: StepRows takes several positions of a slot
  // (prefill chunks) and Start begins empty sequences.
  HostDecodeBackend(Model& model, int max_sequences, int max_batch, int64_t max_positions,
                    bool collective = false, int max_rows_per_slot = 1);

  absl::Status Import(int slot, const SequenceState& state) override;
  absl::Status Export(int slot, SequenceState& state) override;
  absl::Status Release(int slot) override;
  absl::StatusOr<std::vector<float>> Step(std::span<const int> slots,
                                          std::span<const int64_t> tokens) override;
  absl::Status Start(int slot) override;
  absl::StatusOr<std::span<const float>> StepRows(
      std::span<const int> slots, std::span<const int64_t> tokens,
      std::optional<std::span<const int>> logit_rows) override;
  int max_rows_per_slot() const override { return max_rows_per_slot_; }
  int max_batch() const override { return max_batch_; }
  int max_sequences() const override { return static_cast<int>(slots_.size()); }
  int64_t max_positions() const override { return max_positions_; }
  bool collective() const override { return collective_; }

  void fail_next_step() { fail_in_ = 1; }
  // The step after `steps` more successful ones fails instead.
  void fail_step_after(int steps) { fail_in_ = steps + 1; }
  const HostDecodeBackendStats& stats() const { return stats_; }
  bool holds(int slot) const { return slot >= 0 && slot < max_sequences() && slots_[slot]; }

 private:
  Model& model_;
  const int max_batch_;
  const int64_t max_positions_;
  const bool collective_;
  const int max_rows_per_slot_;
  std::vector<std::unique_ptr<SequenceState>> slots_;
  std::vector<float> rows_view_;  // StepRows' logits
  int fail_in_ = 0;               // > 0: the fail_in_-th step from now fails
  HostDecodeBackendStats stats_;
};

}  // namespace weir::model

#endif  // WEIR_WORKER_MODEL_HOST_DECODE_BACKEND_H_
