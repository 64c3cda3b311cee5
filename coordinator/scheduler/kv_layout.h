// coordinator/scheduler/kv_layout.h
//
// KvLayout: the shape of one DP rank's KV memory as the scheduler sees it —
// a pool of fixed-size blocks for compressed KV and a pool of per-sequence
// slots (SWA rings, compressor partial groups, draft and Engram state). In
// serving it is what the workers reported at LoadWeights
// (coordinator/kv_capacity.h), so every block id the block manager hands out
// exists in the worker's pool (worker/kv_cache).
//
// Thread safety: value type and pure functions; safe to use concurrently.

#ifndef WEIR_COORDINATOR_SCHEDULER_KV_LAYOUT_H_
#define WEIR_COORDINATOR_SCHEDULER_KV_LAYOUT_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"

namespace weir::coordinator::scheduler {

// A block covers `block_tokens` consecutive token positions of one sequence
// for every kv-source layer at once. A layer of compress ratio r keeps one
// entry per r complete tokens (entry j exists once position j*r + r - 1 is
// written), so a block holds block_tokens / r entries of that layer.
struct KvLayout {
  // Token positions covered by one block; every compress ratio divides it.
  int32_t block_tokens = 64;
  // Compress ratios (> 0) of the kv-source layers; duplicates are allowed.
  // Empty = no compressed KV (an SWA-only model): sequences need no blocks.
  std::vector<int32_t> compress_ratios = {1};
  // Blocks in the pool.
  int32_t num_blocks = 0;
  // Sequence slots in the pool (one per live sequence: SWA ring and state).
  int32_t num_seq_slots = 0;
};

// Returns OK if `layout` is usable, else INVALID_ARGUMENT naming the field:
// block_tokens >= 1, every ratio >= 1 and dividing block_tokens,
// num_blocks >= 0, num_seq_slots >= 1.
absl::Status ValidateKvLayout(const KvLayout& layout);

// Returns the blocks a sequence of `num_tokens` written positions needs: the
// maximum over ratios r of ceil(floor(num_tokens / r) / (block_tokens / r)).
// Monotone non-decreasing in `num_tokens`; 0 for num_tokens <= 0.
// REQUIRES: ValidateKvLayout(layout).ok().
int64_t BlocksForTokens(const KvLayout& layout, int64_t num_tokens);

}  // namespace weir::coordinator::scheduler

#endif  // WEIR_COORDINATOR_SCHEDULER_KV_LAYOUT_H_
