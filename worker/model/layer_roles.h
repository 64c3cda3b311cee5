// worker/model/layer_roles.h
//
// LayerRoles: what each layer of a V4.1 model does and whom it shares state
// with, derived from ModelConfig by the rules of spec §4.2:
//
//   * ratio 0                    -> kSwaOnly (window attention only; DSpark stages too)
//   * ratio > 0, kv source       -> kFull    (own compressor, index K, indexer, top-k)
//   * ratio > 0, index source    -> kReindex (own indexer Q over the kv source's index K;
//                                             restricted to the candidate pool when the
//                                             candidate source is an earlier layer)
//   * ratio > 0, neither         -> kReuse   (kv from the latest kv source <= layer,
//                                             top-k from the latest index source <= layer)
//
// Thread safety: immutable after construction; const access is thread-safe.

#ifndef WEIR_WORKER_MODEL_LAYER_ROLES_H_
#define WEIR_WORKER_MODEL_LAYER_ROLES_H_

#include <string>
#include <vector>

#include "worker/model/config.h"

namespace weir::model {

enum class AttentionRole { kSwaOnly, kFull, kReuse, kReindex };

// Returns "swa", "full", "reuse" or "reindex".
const char* AttentionRoleName(AttentionRole role);

struct LayerRole {
  int layer = 0;  // 0..n_layers-1 backbone, n_layers.. DSpark stage (mtp.{layer-n_layers})
  int ratio = 0;  // compress ratio
  AttentionRole attention = AttentionRole::kSwaOnly;
  bool is_dspark_stage = false;
  bool is_decoder = false;  // CED: layer >= decoder_start (backbone only)
  // Layer whose compressed KV and index K this layer reads (itself for kFull); -1 if ratio 0.
  int kv_source = -1;
  // Layer whose top-k indices this layer uses (itself for kFull/kReindex); -1 if ratio 0.
  int index_source = -1;
  // True for the candidate source layer: publishes the candidate block pool.
  bool produces_candidates = false;
  // Candidate source whose pool restricts this layer's indexer scores; -1 if none.
  int candidate_source = -1;
  bool has_engram = false;          // Engram module applied before this block
  bool is_dspark_target = false;    // input of this layer feeds DSpark main_hidden
  // Parameter ownership (which checkpoint tensors exist, spec §4.10).
  bool has_compressor = false;      // attn.compressor.* and attn.indexer.{wk,k_norm}
  bool has_indexer = false;         // attn.indexer.{wq_b,weights_proj}
};

class LayerRoles {
 public:
  // REQUIRES: ValidateModelConfig(config).ok().
  explicit LayerRoles(const ModelConfig& config);

  // One entry per layer, backbone then DSpark stages. [n_layers + n_mtp_layers]
  const std::vector<LayerRole>& layers() const { return layers_; }
  // REQUIRES: 0 <= layer < layers().size().
  const LayerRole& operator[](int layer) const { return layers_[layer]; }
  int size() const { return static_cast<int>(layers_.size()); }

  // One line per layer ("20 r=1 full kv=20 idx=20 pool-producer decoder"), for
  // logs and docs.
  std::string DebugString() const;

 private:
  std::vector<LayerRole> layers_;
};

}  // namespace weir::model

#endif  // WEIR_WORKER_MODEL_LAYER_ROLES_H_
