// worker/model/decode_backend.h
//
// DecodeBackend: where a step executor sends its decode rows (one new token
// per sequence) when sequences can live outside their host SequenceState:
// a sequence moves in (Import), decodes there for many steps (Step), and
// comes back (Export) before anything else uses its host state.
// Implementations: DeviceDecoder (device_decoder.h: KV and activations on a
// GPU, CUDA graphs) and HostDecodeBackend (host_decode_backend.h: the model
// itself on copies of the states; the CPU stand-in the executor's tests use).
//
// Contract shared by the implementations: slots are 0 .. max_sequences()-1;
// Step's logits are [rows, vocab] in row order; a failed Step (anything but
// INVALID_ARGUMENT / OUT_OF_RANGE, which change nothing) drops every slot of
// the step. A collective backend (one rank of an expert-parallel group) takes
// part in collectives in Step: every rank calls it exactly once per step of
// the group, with an empty batch when it has no rows, and a refused batch has
// still joined the step.
//
// Thread safety: implementations are not thread-safe; one caller at a time.

#ifndef WEIR_WORKER_MODEL_DECODE_BACKEND_H_
#define WEIR_WORKER_MODEL_DECODE_BACKEND_H_

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "worker/model/draft_result.h"
#include "worker/model/sequence_state.h"

namespace weir::model {

class DecodeBackend {
 public:
  virtual ~DecodeBackend() = default;

  // Copies `state` (prefilled, at least one position) into `slot`, replacing
  // what it held. INVALID_ARGUMENT when the backend cannot take it (bad slot,
  // broken or foreign state, too long): the caller keeps decoding on the host.
  virtual absl::Status Import(int slot, const SequenceState& state) = 0;
  // Writes the slot's sequence back into `state` (the state imported into
  // it) and advances it to the slot's length.
  virtual absl::Status Export(int slot, SequenceState& state) = 0;
  // Forgets the slot's sequence.
  virtual absl::Status Release(int slot) = 0;
  // The positions of `slot` below `positions` are its prompt's, the rest its
  // output (generated, or recomputed after a preemption). A backend may run
  // prompt positions in a shape of their own (DeviceDecoder's
  // prompt_range_tiles: an attention shaped for long chunks), so a position's
  // arithmetic follows the sequence alone, never how its chunks or batches
  // fell. Start and Import set 0 (every position output); the caller sets it
  // before the steps it concerns and whenever it changes. The default takes
  // it and changes nothing.
  virtual absl::Status SetPromptEnd(int slot, int64_t positions) { return absl::OkStatus(); }
  // Row i appends tokens[i] to the sequence of slots[i]; logits [rows, vocab].
  virtual absl::StatusOr<std::vector<float>> Step(std::span<const int> slots,
                                                  std::span<const int64_t> tokens) = 0;
  // Step without the copy: the logits [rows, vocab] stay where the backend
  // keeps them and the view is valid until the next Step or StepView (a
  // DeviceDecoder's pinned host buffer: at batch 64 of V4.1's vocabulary,
  // 33 MB a step that is neither allocated nor copied again). The default
  // keeps Step's result.
  virtual absl::StatusOr<std::span<const float>> StepView(std::span<const int> slots,
                                                          std::span<const int64_t> tokens) {
    absl::StatusOr<std::vector<float>> logits = Step(slots, tokens);
    if (!logits.ok()) return logits.status();
    view_ = *std::move(logits);
    return std::span<const float>(view_);
  }
  // Several consecutive positions of a slot in one step (device-resident
  // prefill chunks): the most rows one slot may have in a StepRows call; 1
  // (the default) when the backend only decodes.
  virtual int max_rows_per_slot() const { return 1; }
  // Starts an empty sequence in `slot` (its first row is position 0), for a
  // prompt fed by StepRows. UNIMPLEMENTED unless max_rows_per_slot() > 1.
  virtual absl::Status Start(int slot) {
    return absl::UnimplementedError("this decode backend does not start sequences");
  }
  // StepView where the rows of one slot (adjacent, at most
  // max_rows_per_slot()) take its next positions in row order, and only the
  // rows in `logit_rows` (ascending; nullopt: every row) return logits,
  // [logit_rows.size(), vocab]. The logits of a row equal what stepping the
  // positions one at a time gives. The default takes only one row a slot and
  // every row's logits (StepView), then keeps the rows asked.
  virtual absl::StatusOr<std::span<const float>> StepRows(
      std::span<const int> slots, std::span<const int64_t> tokens,
      std::optional<std::span<const int>> logit_rows) {
    const int64_t rows = static_cast<int64_t>(slots.size());
    if (absl::Status s = CheckLogitRows(logit_rows, rows); !s.ok()) return s;
    absl::StatusOr<std::span<const float>> all = StepView(slots, tokens);
    if (!all.ok() || !logit_rows.has_value()) return all;
    std::vector<float> kept;
    KeepRows(*all, rows, *logit_rows, kept);
    view_ = std::move(kept);
    return std::span<const float>(view_);
  }
  // Codes StepRowsGreedy gives a row instead of a token: NaN or +Inf among
  // its logits (the sampler's NUMERICAL_ERROR), every logit -Inf (its
  // "every token is masked").
  static constexpr int32_t kGreedyNonFinite = -1;
  static constexpr int32_t kGreedyAllMasked = -2;
  // StepRows where each asked row comes back as its greedy token instead of
  // its logits: the largest logit, ties to the lowest id (the CPU sampler's
  // choice for a greedy row without bias or penalties), or a code above;
  // [logit_rows.size()] (nullopt: every row), valid until the next step. A
  // backend on a GPU picks there and copies back 4 bytes a row instead of
  // the row's logits (33 MB a step at batch 64 of V4.1's vocabulary) and
  // the host's pass over them. The default picks from StepRows' logits.
  virtual absl::StatusOr<std::span<const int32_t>> StepRowsGreedy(
      std::span<const int> slots, std::span<const int64_t> tokens,
      std::optional<std::span<const int>> logit_rows) {
    absl::StatusOr<std::span<const float>> logits = StepRows(slots, tokens, logit_rows);
    if (!logits.ok()) return logits.status();
    const size_t asked = logit_rows.has_value() ? logit_rows->size() : slots.size();
    greedy_view_.resize(asked);
    const size_t vocab = asked > 0 ? logits->size() / asked : 0;
    for (size_t r = 0; r < asked; ++r)
      greedy_view_[r] = GreedyPick(logits->subspan(r * vocab, vocab));
    return std::span<const int32_t>(greedy_view_);
  }
  // The greedy token of one row of logits, or a kGreedy* code.
  static int32_t GreedyPick(std::span<const float> row) {
    int32_t best = kGreedyAllMasked;
    float best_value = -std::numeric_limits<float>::infinity();
    for (size_t i = 0; i < row.size(); ++i) {
      const float v = row[i];
      if (std::isnan(v) || v == std::numeric_limits<float>::infinity()) return kGreedyNonFinite;
      if (v > best_value) {
        best_value = v;
        best = static_cast<int32_t>(i);
      }
    }
    return best;
  }
  // Paged KV addressed by the caller's blocks (a worker's pool, the
  // coordinator's block ids): true when the backend reads and writes a
  // slot's compressed KV through a block table the caller gives. The caller
  // then sets a slot's table (SetBlockTable) before Start or Import and again
  // whenever it grows, before the step that needs it; Release forgets it. A
  // step whose rows pass a slot's table is OUT_OF_RANGE, an Import beyond it
  // INVALID_ARGUMENT.
  virtual bool takes_block_tables() const { return false; }
  // `blocks` (ids of the caller's pool, in position order) become `slot`'s
  // table. INVALID_ARGUMENT (nothing changes) for a block out of the pool,
  // repeated or held by another slot, a table shorter than the slot's
  // sequence, or one that moves a block holding entries.
  virtual absl::Status SetBlockTable(int slot, std::span<const int32_t> blocks) {
    return absl::UnimplementedError("this decode backend keeps no block tables");
  }
  // Speculative decoding on the backend: true when it keeps each slot's
  // draft state (the DSpark rings, updated by every step) and drafts. The
  // caller then verifies a slot's drafts there (its token and drafts as one
  // run of StepRows, every position's logits), rolls back what it rejects
  // (Rollback) and asks for the next drafts after the token it samples
  // (DraftBatch).
  virtual bool drafts() const { return false; }
  // Drafts after next_tokens[i] for slots[i] (as Model::DraftBatch on the
  // slot's sequence): one result per slot, a failed one for a slot that
  // cannot draft. Without `with_logits` the results' logits are left empty
  // (only a grammar's substitute drafts read them; a device copies [block,
  // vocab] floats a sequence back otherwise).
  virtual std::vector<absl::StatusOr<DraftResult>> DraftBatch(std::span<const int> slots,
                                                              std::span<const int64_t> next_tokens,
                                                              bool with_logits = true) {
    return std::vector<absl::StatusOr<DraftResult>>(
        slots.size(), absl::UnimplementedError("this decode backend does not draft"));
  }
  // Undoes the slot's positions from `length` on (rejected drafts).
  // INVALID_ARGUMENT (nothing changes) for a bad slot or length.
  virtual absl::Status Rollback(int slot, int64_t length) {
    return absl::UnimplementedError("this decode backend does not roll back");
  }
  // The most positions one Rollback undoes (0: it does not roll back). A
  // backend that rolls back but does not draft still verifies drafts made
  // elsewhere (prompt lookup's): a slot's token and drafts as one run of
  // StepRows, then Rollback of what was rejected.
  virtual int64_t max_rollback() const { return 0; }
  // Most rows one Step takes.
  virtual int max_batch() const = 0;
  // Positions one slot holds: a slot of this length takes no more Steps
  // (OUT_OF_RANGE), and a longer state is not imported.
  virtual int64_t max_positions() const = 0;
  virtual int max_sequences() const = 0;
  // True when Step is a collective (see above).
  virtual bool collective() const { return false; }
  // Adds the (token, expert) pairs its steps routed since the last call to
  // `routed` [backbone layer, logical expert] and the pairs its experts
  // computed to `served` [backbone layer], then counts afresh. The default
  // adds nothing: a backend that runs the model is counted by the model's own
  // counters. INVALID_ARGUMENT for spans of other sizes.
  virtual absl::Status TakeExpertLoad(std::span<int64_t> routed, std::span<int64_t> served) {
    return absl::OkStatus();
  }

 protected:
  // INVALID_ARGUMENT unless the logit rows (if any) ascend strictly inside
  // [0, rows).
  static absl::Status CheckLogitRows(std::optional<std::span<const int>> logit_rows, int64_t rows) {
    if (!logit_rows.has_value()) return absl::OkStatus();
    for (size_t k = 0; k < logit_rows->size(); ++k) {
      const int r = (*logit_rows)[k];
      if (r < 0 || r >= rows || (k > 0 && r <= (*logit_rows)[k - 1])) {
        return absl::InvalidArgumentError(absl::StrCat(
            "Step: logit row ", r, " (logit rows ascend, each below the ", rows, " rows)"));
      }
    }
    return absl::OkStatus();
  }
  // The rows `logit_rows` of `all` ([rows, vocab]) into `out`, in order.
  static void KeepRows(std::span<const float> all, int64_t rows, std::span<const int> logit_rows,
                       std::vector<float>& out) {
    const size_t vocab = rows > 0 ? all.size() / static_cast<size_t>(rows) : 0;
    out.clear();
    out.reserve(logit_rows.size() * vocab);
    for (int r : logit_rows) {
      out.insert(out.end(), all.begin() + r * vocab, all.begin() + (r + 1) * vocab);
    }
  }

 private:
  std::vector<float> view_;  // the default StepView's logits
  std::vector<int32_t> greedy_view_;  // the default StepRowsGreedy's tokens
};

}  // namespace weir::model

#endif  // WEIR_WORKER_MODEL_DECODE_BACKEND_H_
