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
  int64_t table_sets = 0;  // SetBlockTable calls accepted
  int64_t drafts = 0;      // sequences drafted (DraftBatch rows)
  int64_t draft_logits = 0;  // of those, drafted with their logits (with_logits)
  int64_t rollbacks = 0;   // Rollback calls that undid positions
  int64_t greedy_steps = 0;  // StepRowsGreedy calls (the default pick over StepRows)
  // Rows stepped at a position below their slot's prompt end (SetPromptEnd)
  // and at or past it: what a backend shaping the prompt's arithmetic would
  // run each way.
  int64_t prompt_rows = 0;
  int64_t output_rows = 0;
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
  // Kept per slot (0 after Start and Import) and counted by StepRows
  // (stats().prompt_rows / output_rows). INVALID_ARGUMENT for a slot it
  // does not hold or positions < 0.
  absl::Status SetPromptEnd(int slot, int64_t positions) override;
  int64_t prompt_end(int slot) const { return prompt_ends_[slot]; }
  // Counted (stats().greedy_steps), then DecodeBackend's pick on the host.
  absl::StatusOr<std::span<const int32_t>> StepRowsGreedy(
      std::span<const int> slots, std::span<const int64_t> tokens,
      std::optional<std::span<const int>> logit_rows) override {
    ++stats_.greedy_steps;
    return DecodeBackend::StepRowsGreedy(slots, tokens, logit_rows);
  }
  absl::StatusOr<std::span<const float>> StepRows(
      std::span<const int> slots, std::span<const int64_t> tokens,
      std::optional<std::span<const int>> logit_rows) override;
  int max_rows_per_slot() const override { return max_rows_per_slot_; }
  int max_batch() const override { return max_batch_; }
  int max_sequences() const override { return static_cast<int>(slots_.size()); }
  int64_t max_positions() const override { return max_positions_; }
  bool collective() const override { return collective_; }

  // From now on the backend takes block tables (takes_block_tables) over a
  // pool of `pool_blocks` blocks of `block_tokens` positions, and checks
  // them as DeviceDecoder with external_block_tables does: SetBlockTable's
  // refusals, Import and Start only within the slot's table (a step whose
  // rows pass it is OUT_OF_RANGE), Release forgetting it. It still decodes
  // on its own copies: the tables are checked, not read. REQUIRES: no slot
  // is held; block_tokens a multiple of every compress ratio of the model.
  void ExpectBlockTables(int block_tokens, int64_t pool_blocks);
  bool takes_block_tables() const override { return block_tokens_ > 0; }
  absl::Status SetBlockTable(int slot, std::span<const int32_t> blocks) override;
  // Blocks a sequence of `positions` positions needs (BlocksForPositions).
  int64_t BlocksFor(int64_t positions) const;
  std::span<const int32_t> table(int slot) const { return tables_[slot]; }

  // From now on the backend drafts (drafts(): true): DraftBatch is the
  // model's on the slot's own sequence (whose DSpark rings every step here
  // keeps), Rollback the sequence's, refusing (INVALID_ARGUMENT) to undo more
  // than `max_rollback` positions when > 0, as DeviceDecoder does past its
  // options.max_rollback. REQUIRES: the model has DSpark stages.
  void EnableDrafting(int max_rollback = 0) {
    drafting_ = true;
    EnableRollback(max_rollback);
  }
  // From now on Rollback undoes up to `max_rollback` positions of a slot's
  // sequence (0: any number), without drafting: the backend of prompt lookup
  // alone.
  void EnableRollback(int max_rollback = 0) {
    rollback_ = true;
    max_rollback_ = max_rollback;
  }
  bool drafts() const override { return drafting_; }
  int64_t max_rollback() const override {
    return !rollback_ ? 0 : max_rollback_ > 0 ? max_rollback_ : INT64_MAX;
  }
  std::vector<absl::StatusOr<DraftResult>> DraftBatch(std::span<const int> slots,
                                                      std::span<const int64_t> next_tokens,
                                                      bool with_logits = true) override;
  absl::Status Rollback(int slot, int64_t length) override;

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
  std::vector<int64_t> prompt_ends_;  // [slot] SetPromptEnd
  std::vector<float> rows_view_;  // StepRows' logits
  int fail_in_ = 0;               // > 0: the fail_in_-th step from now fails
  int block_tokens_ = 0;          // > 0: block tables expected (ExpectBlockTables)
  bool drafting_ = false;         // EnableDrafting
  bool rollback_ = false;         // EnableRollback (and EnableDrafting)
  int max_rollback_ = 0;          // EnableRollback: > 0 caps a Rollback
  std::vector<int32_t> owner_;    // [pool blocks] slot or -1
  std::vector<std::vector<int32_t>> tables_;  // [slot]
  HostDecodeBackendStats stats_;
};

}  // namespace weir::model

#endif  // WEIR_WORKER_MODEL_HOST_DECODE_BACKEND_H_
