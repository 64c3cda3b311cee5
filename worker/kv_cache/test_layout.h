// worker/kv_cache/test_layout.h — the small hand-made layout the pool and
// store tests share. Test-only.
#ifndef WEIR_WORKER_KV_CACHE_TEST_LAYOUT_H_
#define WEIR_WORKER_KV_CACHE_TEST_LAYOUT_H_

#include "worker/kv_cache/kv_cache_layout.h"

namespace weir::worker::kv_cache {

// Layers 0 (ratio 1) and 2 (ratio 2; layer 1 has no compressed KV), kv_dim 4,
// index_dim 2, 4 tokens a block, unpacked (fp32): 16 + 8 floats for layer 0,
// 8 + 4 for layer 2 (offsets in bytes).
inline KvCacheLayout SmallTestLayout() {
  KvCacheLayout layout;
  layout.block_tokens = 4;
  layout.layer_index = {0, -1, 1};
  layout.layers.push_back({.layer = 0, .ratio = 1, .kv_dim = 4, .index_dim = 2,
                           .entries_per_block = 4, .kv_offset = 0, .index_offset = 64});
  layout.layers.push_back({.layer = 2, .ratio = 2, .kv_dim = 4, .index_dim = 2,
                           .entries_per_block = 2, .kv_offset = 96, .index_offset = 128});
  layout.block_floats = 36;
  return layout;
}

}  // namespace weir::worker::kv_cache

#endif  // WEIR_WORKER_KV_CACHE_TEST_LAYOUT_H_
