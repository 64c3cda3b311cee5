// worker/model/compressed_kv_store.h
//
// CompressedKvStore: where one sequence's compressed KV entries and index keys
// live, per kv-source layer (spec §4.3.1-§4.3.2). The forward appends the
// entries a chunk completes and copies them back in entry order; it never sees
// how they are laid out. DenseKvStore keeps them in per-layer vectors (a model
// used on its own, tests, copies of a state); the worker's paged store
// (worker/kv_cache/paged_kv_store.h) keeps them in fixed-size blocks of a pool
// that the coordinator assigns.
//
// Values are stored as the forward computes them: the fp32 values of the
// quantized formats (main KV: FP4 e2m1 x E4M3 per 16, index keys: MXFP4), so
// any store gives the forward the same bits.
//
// Thread safety: implementations are not thread-safe; one forward of the
// sequence at a time.

#ifndef WEIR_WORKER_MODEL_COMPRESSED_KV_STORE_H_
#define WEIR_WORKER_MODEL_COMPRESSED_KV_STORE_H_

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "worker/model/config.h"
#include "worker/model/layer_roles.h"

namespace weir::model {

// Entry j of kv-source layer `layer` is the pair (kv [kv_dim], index_k
// [index_dim]); entries are appended in order and only the tail is dropped.
class CompressedKvStore {
 public:
  virtual ~CompressedKvStore() = default;

  // Entries held by kv-source layer `layer`.
  // REQUIRES: `layer` is a kv source of the model the store was made for.
  virtual int64_t entries(int layer) const = 0;

  // Appends count = kv.size() / kv_dim entries to `layer`: kv [count,
  // kv_dim], index_k [count, index_dim]. RESOURCE_EXHAUSTED when the storage
  // cannot hold entries(layer) + count entries (a paged store whose blocks
  // end first); nothing is written then.
  // REQUIRES: the two spans hold the same number of whole entries.
  virtual absl::Status Append(int layer, std::span<const float> kv,
                              std::span<const float> index_k) = 0;

  // Drops the entries of `layer` from `entries` on. REQUIRES: 0 <= entries
  // <= entries(layer).
  virtual void Truncate(int layer, int64_t entries) = 0;

  // Copies entries [first, first + count) of `layer` into `out` [count,
  // kv_dim] (count = out.size() / kv_dim). ReadIndexK: the same for the
  // index keys, `out` [count, index_dim].
  // REQUIRES: first >= 0 and first + count <= entries(layer).
  virtual void ReadKv(int layer, int64_t first, std::span<float> out) const = 0;
  virtual void ReadIndexK(int layer, int64_t first, std::span<float> out) const = 0;
};

// The entries in per-layer vectors that grow as needed.
class DenseKvStore final : public CompressedKvStore {
 public:
  // Shape of one layer: kv_dim == 0 for a layer that is not a kv source.
  struct LayerDims {
    int64_t kv_dim = 0;
    int64_t index_dim = 0;
  };

  // An empty store for the kv-source layers of `roles`.
  DenseKvStore(const ModelConfig& config, const LayerRoles& roles);
  // An empty store with `dims` [layers] by layer id.
  explicit DenseKvStore(const std::vector<LayerDims>& dims);

  int64_t entries(int layer) const override;
  absl::Status Append(int layer, std::span<const float> kv,
                      std::span<const float> index_k) override;
  void Truncate(int layer, int64_t entries) override;
  void ReadKv(int layer, int64_t first, std::span<float> out) const override;
  void ReadIndexK(int layer, int64_t first, std::span<float> out) const override;

 private:
  struct Layer {
    int64_t kv_dim = 0;  // 0: not a kv source
    int64_t index_dim = 0;
    std::vector<float> kv;       // [entries, kv_dim]
    std::vector<float> index_k;  // [entries, index_dim]
  };
  std::vector<Layer> layers_;  // indexed by layer id
};

}  // namespace weir::model

#endif  // WEIR_WORKER_MODEL_COMPRESSED_KV_STORE_H_
