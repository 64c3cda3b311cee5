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

// One kv-source layer inside a block. Offsets and sizes are in floats: the
// CPU model stores the fp32 values of the quantized formats (FP4 e2m1 x E4M3
// per 16 for the KV, MXFP4 for the index keys), not packed codes and scales.
struct KvLayerLayout {
  int layer = 0;               // the model's layer id
  int ratio = 0;               // compress ratio (>= 1)
  int64_t kv_dim = 0;          // head_dim
  int64_t index_dim = 0;       // index_head_dim
  int64_t entries_per_block = 0;  // block_tokens / ratio
  int64_t kv_offset = 0;       // [entries_per_block, kv_dim] from here
  int64_t index_offset = 0;    // [entries_per_block, index_dim] from here
};

struct KvCacheLayout {
  int32_t block_tokens = 0;
  // The kv-source layers in layer order; empty for a model without
  // compressed KV (its sequences need no blocks).
  std::vector<KvLayerLayout> layers;
  // Floats in one block (sum over layers of entries_per_block * (kv_dim + index_dim)).
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
// positions per block. INVALID_ARGUMENT if block_tokens < 1 or a compress
// ratio does not divide it.
// REQUIRES: `roles` was built from `config`.
absl::StatusOr<KvCacheLayout> MakeKvCacheLayout(const model::ModelConfig& config,
                                                const model::LayerRoles& roles,
                                                int32_t block_tokens);

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
