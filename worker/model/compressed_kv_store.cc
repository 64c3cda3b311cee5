#include "worker/model/compressed_kv_store.h"

#include <algorithm>

#include "base/logging.h"

namespace weir::model {

DenseKvStore::DenseKvStore(const ModelConfig& config, const LayerRoles& roles)
    : layers_(roles.size()) {
  for (const LayerRole& role : roles.layers()) {
    if (!role.has_compressor) continue;
    layers_[role.layer].kv_dim = config.head_dim;
    layers_[role.layer].index_dim = config.index_head_dim;
  }
}

DenseKvStore::DenseKvStore(const std::vector<LayerDims>& dims) : layers_(dims.size()) {
  for (size_t l = 0; l < dims.size(); ++l) {
    layers_[l].kv_dim = dims[l].kv_dim;
    layers_[l].index_dim = dims[l].index_dim;
  }
}

int64_t DenseKvStore::entries(int layer) const {
  const Layer& l = layers_[layer];
  WEIR_DCHECK(l.kv_dim > 0);
  return static_cast<int64_t>(l.kv.size()) / l.kv_dim;
}

absl::Status DenseKvStore::Append(int layer, std::span<const float> kv,
                                  std::span<const float> index_k) {
  Layer& l = layers_[layer];
  WEIR_DCHECK(l.kv_dim > 0 && kv.size() % l.kv_dim == 0 &&
              kv.size() / l.kv_dim * l.index_dim == index_k.size());
  l.kv.insert(l.kv.end(), kv.begin(), kv.end());
  l.index_k.insert(l.index_k.end(), index_k.begin(), index_k.end());
  return absl::OkStatus();
}

void DenseKvStore::Truncate(int layer, int64_t entries) {
  Layer& l = layers_[layer];
  WEIR_DCHECK(entries >= 0 && entries <= this->entries(layer));
  l.kv.resize(entries * l.kv_dim);
  l.index_k.resize(entries * l.index_dim);
}

void DenseKvStore::ReadKv(int layer, int64_t first, std::span<float> out) const {
  const Layer& l = layers_[layer];
  WEIR_DCHECK(first >= 0 && first * l.kv_dim + static_cast<int64_t>(out.size()) <=
                                static_cast<int64_t>(l.kv.size()));
  std::copy_n(l.kv.begin() + first * l.kv_dim, out.size(), out.begin());
}

void DenseKvStore::ReadIndexK(int layer, int64_t first, std::span<float> out) const {
  const Layer& l = layers_[layer];
  WEIR_DCHECK(first >= 0 && first * l.index_dim + static_cast<int64_t>(out.size()) <=
                                static_cast<int64_t>(l.index_k.size()));
  std::copy_n(l.index_k.begin() + first * l.index_dim, out.size(), out.begin());
}

}  // namespace weir::model
