// worker/model/sequence_state.h
//
// SequenceState: everything one sequence carries between forwards of the V4.1
// model (spec §4.3-§4.8, §11 item 3):
//   * per layer, the SWA ring of window KV (FP8-rounded, post-RoPE) [head_dim];
//   * per kv-source layer, the compressed KV [entries, head_dim] (post-RoPE,
//     FP4/E4M3-16 rounded) and the index keys [entries, index_head_dim]
//     (MXFP4 rounded), kept in a CompressedKvStore (dense vectors by default,
//     the worker's paged blocks in serving), and, at ratio > 1, the
//     compressor inputs of recent tokens (kv, score) [2 * head_dim] from
//     which the partial group is rebuilt;
//   * the Engram history of compressed token ids;
//   * per DSpark stage, the ring of main-feature KV [head_dim] (§4.8);
//   * the CED bounded-replay start (§4.4): decoder layers run, and keep SWA
//     rows, only at positions >= replay_start() (0 = the exact forward).
// Rings keep `window + max_rollback` positions (compressor: `ratio +
// max_rollback`), so the last `max_rollback` positions can be dropped
// (rejected drafts) and replayed without recomputing anything older.
//
// Thread safety: not thread-safe; owned by one sequence's forward at a time.

#ifndef WEIR_WORKER_MODEL_SEQUENCE_STATE_H_
#define WEIR_WORKER_MODEL_SEQUENCE_STATE_H_

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "worker/model/compressed_kv_store.h"
#include "worker/model/config.h"
#include "worker/model/layer_roles.h"

namespace weir::model {

// Fixed-width rows for the latest `capacity` positions (slot = pos % capacity).
class PositionRing {
 public:
  PositionRing() = default;
  PositionRing(int64_t capacity, int64_t width)
      : capacity_(capacity), width_(width), data_(capacity * width, 0.0f) {}

  // The row of position `pos`. REQUIRES: capacity() > 0, pos >= 0; the row
  // holds pos's data only if pos is among the latest `capacity` written.
  std::span<float> Row(int64_t pos) {
    return std::span<float>(data_).subspan((pos % capacity_) * width_, width_);
  }
  std::span<const float> Row(int64_t pos) const {
    return std::span<const float>(data_).subspan((pos % capacity_) * width_, width_);
  }
  int64_t capacity() const { return capacity_; }
  int64_t width() const { return width_; }

 private:
  int64_t capacity_ = 0;
  int64_t width_ = 0;
  std::vector<float> data_;
};

// Compressor state of one kv-source layer (its entries are in the
// sequence's CompressedKvStore: entries = length / ratio).
struct KvSourceState {
  int ratio = 0;
  int64_t kv_dim = 0;     // head_dim
  int64_t index_dim = 0;  // index_head_dim
  PositionRing pending;   // ratio > 1: [kv ; score] of recent tokens
};

class SequenceState {
 public:
  // Creates an empty sequence for `config` whose compressed entries live in
  // a DenseKvStore. `max_rollback` >= 0 bounds Rollback.
  // REQUIRES: ValidateModelConfig(config).ok(); `roles` built from it.
  SequenceState(const ModelConfig& config, const LayerRoles& roles, int64_t max_rollback);
  // The same with the compressed entries in `store` (empty, made for this
  // model's kv-source layers). REQUIRES: `store` is not null.
  SequenceState(const ModelConfig& config, const LayerRoles& roles, int64_t max_rollback,
                std::unique_ptr<CompressedKvStore> store);

  // A deep copy whose compressed entries live in a DenseKvStore of its own,
  // whatever `other`'s store is (a copy never shares paged blocks).
  SequenceState(const SequenceState& other);
  // Use CopyFrom, which keeps this state's store.
  SequenceState& operator=(const SequenceState&) = delete;
  SequenceState(SequenceState&&) = default;
  SequenceState& operator=(SequenceState&&) = default;

  // Makes this state equal to `other` (same model shape): length, rings,
  // Engram history, broken flag, and the compressed entries, which are
  // written into this state's own store. On error (the store's Append, e.g.
  // RESOURCE_EXHAUSTED from a paged store with too few blocks) the state is
  // marked broken.
  absl::Status CopyFrom(const SequenceState& other);

  // Positions processed so far (the next forward starts here).
  int64_t length() const { return length_; }
  // CED bounded replay (spec §4.4; set by Model::StartCedReplay before the
  // first forward): the CED decoder layers run only at positions >=
  // replay_start(), and their SWA sees only positions >= it. 0 = every layer
  // at every position (the exact forward). Kept by copies and rollbacks.
  int64_t replay_start() const { return replay_start_; }
  void set_replay_start(int64_t pos) { replay_start_ = pos; }
  int64_t max_rollback() const { return max_rollback_; }

  // Drops the last `k` positions, as if they had never been forwarded.
  // INVALID_ARGUMENT if k < 0, k > length() or k > max_rollback(); then
  // nothing changes. (Rings keep window + max_rollback positions, so any
  // k <= max_rollback is exact, whatever chunk sizes came before.)
  absl::Status Rollback(int64_t k);

  // --- for the forward (model.cc and its layers)
  PositionRing& window(int layer) { return windows_[layer]; }
  const PositionRing& window(int layer) const { return windows_[layer]; }
  // REQUIRES: `layer` is a kv source.
  KvSourceState& kv_source(int layer) { return kv_sources_[layer]; }
  const KvSourceState& kv_source(int layer) const { return kv_sources_[layer]; }
  // The compressed KV and index keys of every kv-source layer.
  CompressedKvStore& compressed() { return *compressed_; }
  const CompressedKvStore& compressed() const { return *compressed_; }
  std::vector<int64_t>& engram_history() { return engram_history_; }
  const std::vector<int64_t>& engram_history() const { return engram_history_; }
  // Marks `n` more positions as processed (called once per successful forward).
  void Advance(int64_t n) { length_ += n; }
  // A forward that fails after validation (INTERNAL) leaves partial writes:
  // the state is marked broken and later forwards refuse it.
  void MarkBroken() { broken_ = true; }
  bool broken() const { return broken_; }
  // Identifies the model shape this state was built for.
  int num_layers() const { return static_cast<int>(windows_.size()); }

 private:
  int64_t length_ = 0;
  int64_t replay_start_ = 0;
  int64_t max_rollback_ = 0;
  bool broken_ = false;
  std::vector<PositionRing> windows_;       // [n_layers + n_mtp_layers]
  std::vector<KvSourceState> kv_sources_;   // indexed by layer; ratio 0 = not a source
  std::unique_ptr<CompressedKvStore> compressed_;  // never null (moved-from: null)
  std::vector<int64_t> engram_history_;     // [length]
};

}  // namespace weir::model

#endif  // WEIR_WORKER_MODEL_SEQUENCE_STATE_H_
