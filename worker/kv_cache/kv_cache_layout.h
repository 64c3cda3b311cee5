// worker/kv_cache/kv_cache_layout.h
//
// KvCacheLayout: the shape of one paged KV block of a model — which kv-source
// layers it covers, how many entries of each, and where each layer's
// compressed KV and index keys sit inside the block — and how many blocks and
// sequence slots a host memory budget holds (SizeKvCache).
//
// A block covers `block_tokens` consecutive positions of one sequence for
// every kv-source layer at once: a layer of compress ratio r keeps
// block_tokens / r entries of it (entry j of the layer is in block
// j / (block_tokens / r)). This is the rule of the coordinator's KvLayout
// (coordinator/scheduler/kv_layout.h), so both count the same blocks.
//
// Thread safety: value types and pure functions.

#ifndef WEIR_WORKER_KV_CACHE_KV_CACHE_LAYOUT_H_
#define WEIR_WORKER_KV_CACHE_KV_CACHE_LAYOUT_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/model/config.h"
#include "worker/model/layer_roles.h"

namespace weir::worker::kv_cache {

// One kv-source layer inside a block. Offsets and entry sizes are in bytes.
// A packed layout (KvCacheLayout::packed, what MakeKvCacheLayout makes) holds
// each entry in the model's stored form: the compressed KV as FP4 e2m1 codes
// (two per byte, element 2k low) followed by its E4M3 scales per 16
// (kv_dim / 2 + kv_dim / 16 bytes), the index keys as MXFP4 codes followed
// by their E8M0 scales per 32 (index_dim / 2 + index_dim / 32 bytes). An
// unpacked layout holds the fp32 values (4 bytes an element).
struct KvLayerLayout {
  int layer = 0;               // the model's layer id
  int ratio = 0;               // compress ratio (>= 1)
  int64_t kv_dim = 0;          // head_dim
  int64_t index_dim = 0;       // index_head_dim
  int64_t entries_per_block = 0;  // block_tokens / ratio
  int64_t kv_offset = 0;       // bytes: [entries_per_block, kv_entry_bytes] from here
  int64_t index_offset = 0;    // bytes: [entries_per_block, index_entry_bytes] from here
  int64_t kv_entry_bytes = 0;     // 0: kv_dim * 4 (unpacked layouts may leave it)
  int64_t index_entry_bytes = 0;  // 0: index_dim * 4
};

// Stored-form block sizes of one entry (the packed layout).
constexpr int64_t PackedKvEntryBytes(int64_t kv_dim) { return kv_dim / 2 + kv_dim / 16; }
constexpr int64_t PackedIndexEntryBytes(int64_t index_dim) {
  return index_dim / 2 + index_dim / 32;
}

struct KvCacheLayout {
  int32_t block_tokens = 0;
  // Entries held as codes + scales (see KvLayerLayout) rather than fp32.
  bool packed = false;
  // The kv-source layers in layer order; empty for a model without
  // compressed KV (its sequences need no blocks).
  std::vector<KvLayerLayout> layers;
  // Storage of one block in floats: the layers' bytes (sum over layers of
  // entries_per_block * (kv_entry_bytes + index_entry_bytes)) rounded up to
  // whole floats.
  int64_t block_floats = 0;
  // Layer id -> index into `layers`, -1 for a layer that is not a kv source.
  std::vector<int> layer_index;

  int64_t block_bytes() const { return block_floats * static_cast<int64_t>(sizeof(float)); }
  // The layer's layout, or null if `layer` is not a kv source.
  const KvLayerLayout* Find(int layer) const;
  // Compress ratio of each kv-source layer, in layer order.
  std::vector<int32_t> compress_ratios() const;
};

// Returns the block layout of `config`'s kv-source layers at `block_tokens`
// positions per block, packed (stored form) when head_dim is a multiple of
// 16 and index_head_dim of 32 (every V4.1 config) and `packed` asks for it.
// INVALID_ARGUMENT if block_tokens < 1 or a compress ratio does not divide it.
// REQUIRES: `roles` was built from `config`.
absl::StatusOr<KvCacheLayout> MakeKvCacheLayout(const model::ModelConfig& config,
                                                const model::LayerRoles& roles,
                                                int32_t block_tokens, bool packed = true);

// Returns the blocks a sequence of `positions` written positions needs: the
// maximum over ratios r of ceil(floor(positions / r) / (block_tokens / r)).
// 0 for positions <= 0 or a layout without layers.
int64_t BlocksForPositions(const KvCacheLayout& layout, int64_t positions);

// Bytes of the per-sequence state that is not paged (SWA rings of every
// layer, DSpark stage rings, compressor partial groups), held once per
// sequence slot. The Engram history (8 bytes a position) is not counted.
int64_t SequenceSlotBytes(const model::ModelConfig& config, const model::LayerRoles& roles,
                          int64_t max_rollback);

// What a budget holds.
struct KvCacheSize {
  int64_t num_blocks = 0;
  int32_t num_slots = 0;
  int64_t block_bytes = 0;
  int64_t slot_bytes = 0;
  // Bytes the blocks and slots take: num_blocks * block_bytes + num_slots * slot_bytes.
  int64_t used_bytes = 0;
};

// Sizes a cache of `num_slots` sequence slots of `slot_bytes` each plus as
// many blocks as the rest of `budget_bytes` holds (at most 2^31 - 1).
// `fixed_blocks` > 0 asks for exactly that many blocks whatever the budget
// (tests). Errors: INVALID_ARGUMENT for num_slots < 1 or negative sizes;
// RESOURCE_EXHAUSTED when the budget does not hold the slots and one block
// (the message names every number). A layout without layers gets 0 blocks.
absl::StatusOr<KvCacheSize> SizeKvCache(const KvCacheLayout& layout, int64_t slot_bytes,
                                        int64_t budget_bytes, int32_t num_slots,
                                        int64_t fixed_blocks = 0);

}  // namespace weir::worker::kv_cache

#endif  // WEIR_WORKER_KV_CACHE_KV_CACHE_LAYOUT_H_
