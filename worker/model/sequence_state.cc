#include "worker/model/sequence_state.h"

#include "absl/strings/str_cat.h"

namespace weir::model {

SequenceState::SequenceState(const ModelConfig& config, const LayerRoles& roles,
                             int64_t max_rollback)
    : max_rollback_(max_rollback) {
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

absl::Status SequenceState::Rollback(int64_t k) {
  if (k < 0 || k > length_ || k > max_rollback_) {
    return absl::InvalidArgumentError(absl::StrCat("Rollback(", k, ") with length ", length_,
                                                   " and max_rollback ", max_rollback_));
  }
  length_ -= k;
  for (KvSourceState& s : kv_sources_) {
    if (s.ratio == 0) continue;
    const int64_t entries = length_ / s.ratio;
    s.compressed_kv.resize(entries * s.kv_dim);
    s.index_k.resize(entries * s.index_dim);
  }
  engram_history_.resize(length_);
  return absl::OkStatus();
}

}  // namespace weir::model
