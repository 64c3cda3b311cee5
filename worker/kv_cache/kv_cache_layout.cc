#include "worker/kv_cache/kv_cache_layout.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"

namespace weir::worker::kv_cache {

const KvLayerLayout* KvCacheLayout::Find(int layer) const {
  if (layer < 0 || layer >= static_cast<int>(layer_index.size()) || layer_index[layer] < 0) {
    return nullptr;
  }
  return &layers[layer_index[layer]];
}

std::vector<int32_t> KvCacheLayout::compress_ratios() const {
  std::vector<int32_t> ratios;
  for (const KvLayerLayout& l : layers) ratios.push_back(l.ratio);
  return ratios;
}

absl::StatusOr<KvCacheLayout> MakeKvCacheLayout(const model::ModelConfig& config,
                                                const model::LayerRoles& roles,
                                                int32_t block_tokens, bool packed) {
  if (block_tokens < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("KV block_tokens must be >= 1, got ", block_tokens));
  }
  KvCacheLayout layout;
  layout.block_tokens = block_tokens;
  layout.packed = packed && config.head_dim % 16 == 0 && config.index_head_dim % 32 == 0;
  int64_t bytes = 0;
  layout.layer_index.assign(roles.size(), -1);
  for (const model::LayerRole& role : roles.layers()) {
    if (!role.has_compressor) continue;
    if (role.ratio < 1 || block_tokens % role.ratio != 0) {
      return absl::InvalidArgumentError(absl::StrCat("compress ratio ", role.ratio, " of layer ",
                                                     role.layer, " does not divide block_tokens ",
                                                     block_tokens));
    }
    KvLayerLayout l;
    l.layer = role.layer;
    l.ratio = role.ratio;
    l.kv_dim = config.head_dim;
    l.index_dim = config.index_head_dim;
    l.entries_per_block = block_tokens / role.ratio;
    l.kv_entry_bytes = layout.packed ? PackedKvEntryBytes(l.kv_dim) : l.kv_dim * 4;
    l.index_entry_bytes = layout.packed ? PackedIndexEntryBytes(l.index_dim) : l.index_dim * 4;
    l.kv_offset = bytes;
    l.index_offset = l.kv_offset + l.entries_per_block * l.kv_entry_bytes;
    bytes = l.index_offset + l.entries_per_block * l.index_entry_bytes;
    layout.layer_index[role.layer] = static_cast<int>(layout.layers.size());
    layout.layers.push_back(l);
  }
  layout.block_floats = (bytes + 3) / 4;
  return layout;
}

int64_t BlocksForPositions(const KvCacheLayout& layout, int64_t positions) {
  if (positions <= 0) return 0;
  int64_t blocks = 0;
  for (const KvLayerLayout& l : layout.layers) {
    const int64_t entries = positions / l.ratio;
    blocks = std::max(blocks, (entries + l.entries_per_block - 1) / l.entries_per_block);
  }
  return blocks;
}

int64_t SequenceSlotBytes(const model::ModelConfig& config, const model::LayerRoles& roles,
                          int64_t max_rollback) {
  int64_t floats = 0;
  for (const model::LayerRole& role : roles.layers()) {
    floats += (config.window_size + max_rollback) * config.head_dim;  // SWA / DSpark ring
    if (role.has_compressor && role.ratio > 1) {
      floats += (role.ratio + max_rollback) * 2 * config.head_dim;  // partial group inputs
    }
  }
  return floats * static_cast<int64_t>(sizeof(float));
}

absl::StatusOr<KvCacheSize> SizeKvCache(const KvCacheLayout& layout, int64_t slot_bytes,
                                        int64_t budget_bytes, int32_t num_slots,
                                        int64_t fixed_blocks) {
  if (num_slots < 1 || slot_bytes < 0 || budget_bytes < 0 || fixed_blocks < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "KV cache sizing needs num_slots >= 1 and non-negative sizes; got ", num_slots,
        " slots of ", slot_bytes, " bytes, budget ", budget_bytes, ", fixed blocks ",
        fixed_blocks));
  }
  KvCacheSize size;
  size.num_slots = num_slots;
  size.slot_bytes = slot_bytes;
  size.block_bytes = layout.block_bytes();
  const int64_t slots_total = static_cast<int64_t>(num_slots) * slot_bytes;
  constexpr int64_t kMaxBlocks = std::numeric_limits<int32_t>::max();
  if (size.block_bytes == 0) {
    size.num_blocks = 0;
  } else if (fixed_blocks > 0) {
    size.num_blocks = std::min(fixed_blocks, kMaxBlocks);
  } else {
    const int64_t left = budget_bytes - slots_total;
    if (left < size.block_bytes) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "a KV cache budget of ", budget_bytes, " bytes does not hold ", num_slots,
          " sequence slots of ", slot_bytes, " bytes and one block of ", size.block_bytes,
          " bytes (", layout.block_tokens, " tokens); raise --kv_cache_bytes or lower "
          "--max_slots"));
    }
    size.num_blocks = std::min(left / size.block_bytes, kMaxBlocks);
  }
  size.used_bytes = size.num_blocks * size.block_bytes + slots_total;
  return size;
}

}  // namespace weir::worker::kv_cache
