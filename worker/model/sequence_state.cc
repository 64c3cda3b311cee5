#include "worker/model/sequence_state.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace weir::model {
namespace {

std::vector<DenseKvStore::LayerDims> DimsOf(const std::vector<KvSourceState>& sources) {
  std::vector<DenseKvStore::LayerDims> dims(sources.size());
  for (size_t l = 0; l < sources.size(); ++l) {
    if (sources[l].ratio == 0) continue;
    dims[l] = {.kv_dim = sources[l].kv_dim, .index_dim = sources[l].index_dim};
  }
  return dims;
}

// Copies every compressed entry of `from` into `to` (truncated first).
absl::Status CopyEntries(const std::vector<KvSourceState>& sources, const CompressedKvStore& from,
                         CompressedKvStore& to) {
  std::vector<float> kv, index_k;
  for (size_t l = 0; l < sources.size(); ++l) {
    const KvSourceState& s = sources[l];
    if (s.ratio == 0) continue;
    const int layer = static_cast<int>(l);
    const int64_t n = from.entries(layer);
    kv.resize(n * s.kv_dim);
    index_k.resize(n * s.index_dim);
    from.ReadKv(layer, 0, kv);
    from.ReadIndexK(layer, 0, index_k);
    to.Truncate(layer, 0);
    if (absl::Status st = to.Append(layer, kv, index_k); !st.ok()) {
      return absl::Status(st.code(), absl::StrCat("layer ", layer, ": ", st.message()));
    }
  }
  return absl::OkStatus();
}

}  // namespace

SequenceState::SequenceState(const ModelConfig& config, const LayerRoles& roles,
                             int64_t max_rollback)
    : SequenceState(config, roles, max_rollback, std::make_unique<DenseKvStore>(config, roles)) {}

SequenceState::SequenceState(const ModelConfig& config, const LayerRoles& roles,
                             int64_t max_rollback, std::unique_ptr<CompressedKvStore> store)
    : max_rollback_(max_rollback), compressed_(std::move(store)) {
  windows_.reserve(roles.size());
  kv_sources_.resize(roles.size());
  for (const LayerRole& role : roles.layers()) {
    windows_.emplace_back(config.window_size + max_rollback, config.head_dim);
    if (role.has_compressor) {
      KvSourceState& s = kv_sources_[role.layer];
      s.ratio = role.ratio;
      s.kv_dim = config.head_dim;
      s.index_dim = config.index_head_dim;
      if (role.ratio > 1) s.pending = PositionRing(role.ratio + max_rollback, 2 * config.head_dim);
    }
  }
}

SequenceState::SequenceState(const SequenceState& other)
    : length_(other.length_),
      replay_start_(other.replay_start_),
      max_rollback_(other.max_rollback_),
      broken_(other.broken_),
      windows_(other.windows_),
      kv_sources_(other.kv_sources_),
      compressed_(std::make_unique<DenseKvStore>(DimsOf(other.kv_sources_))),
      engram_history_(other.engram_history_) {
  // A dense store takes any number of entries.
  absl::Status copied = CopyEntries(kv_sources_, *other.compressed_, *compressed_);
  if (!copied.ok()) broken_ = true;
}

absl::Status SequenceState::CopyFrom(const SequenceState& other) {
  if (this == &other) return absl::OkStatus();
  length_ = other.length_;
  replay_start_ = other.replay_start_;
  max_rollback_ = other.max_rollback_;
  broken_ = other.broken_;
  windows_ = other.windows_;
  kv_sources_ = other.kv_sources_;
  engram_history_ = other.engram_history_;
  absl::Status copied = CopyEntries(kv_sources_, *other.compressed_, *compressed_);
  if (!copied.ok()) broken_ = true;
  return copied;
}

absl::Status SequenceState::Rollback(int64_t k) {
  if (k < 0 || k > length_ || k > max_rollback_) {
    return absl::InvalidArgumentError(absl::StrCat("Rollback(", k, ") with length ", length_,
                                                   " and max_rollback ", max_rollback_));
  }
  length_ -= k;
  for (size_t l = 0; l < kv_sources_.size(); ++l) {
    const KvSourceState& s = kv_sources_[l];
    if (s.ratio == 0) continue;
    const int layer = static_cast<int>(l);
    const int64_t entries = length_ / s.ratio;
    if (compressed_->entries(layer) > entries) compressed_->Truncate(layer, entries);
  }
  engram_history_.resize(length_);
  return absl::OkStatus();
}

}  // namespace weir::model
