// worker/kv_cache/block_pool.h
//
// BlockPool: one rank's paged KV memory on the host — `num_blocks` blocks of
// KvCacheLayout::block_floats floats, allocated once at start — and the book
// of which sequence slot holds each block. The coordinator's BlockManager
// decides which block goes where; the pool checks every hand-over against
// its book, so a block given to two live sequences (double ownership), given
// back by a slot that does not hold it (double free), or outside the pool
// (a foreign block) is an error instead of silent corruption.
//
// Thread safety: not thread-safe. Owned by the worker; used on the thread
// that runs the Steps stream (the step executor's).

#ifndef WEIR_WORKER_KV_CACHE_BLOCK_POOL_H_
#define WEIR_WORKER_KV_CACHE_BLOCK_POOL_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/strong_id.h"
#include "worker/kv_cache/kv_cache_layout.h"

namespace weir::worker::kv_cache {

// Usage:
//   ASSIGN_OR_RETURN(auto pool, BlockPool::Create(layout, 1024));
//   RETURN_IF_ERROR(pool->Claim(SeqSlot(3), BlockId(17)));   // from a plan's new_blocks
//   std::span<float> bytes = pool->block(BlockId(17));        // [block_floats]
//   RETURN_IF_ERROR(pool->Release(SeqSlot(3), BlockId(17)));  // slot released
struct BlockPoolOptions {
  // The pool mirrors a device's blocks (a CUDA worker whose decoder pages
  // its KV by the same block ids): most blocks are never written here, only
  // those of sequences that run on the host model (prompt logprobs, CED
  // replays, a sequence brought back from the device). Release then gives a
  // block's whole memory pages back to the system (MADV_DONTNEED; they read
  // as zeros when touched again), so the host's resident memory follows the
  // sequences on the host now, not every block they ever wrote.
  bool mirror = false;
};

class BlockPool {
 public:
  // Reserves `num_blocks` blocks of `layout` as address space only (an
  // anonymous mapping without swap reservation: their contents undefined
  // until written; a page is backed only once a block on it is written).
  // INVALID_ARGUMENT for num_blocks outside [0, 2^31); RESOURCE_EXHAUSTED if
  // the address space cannot be had.
  static absl::StatusOr<std::unique_ptr<BlockPool>> Create(const KvCacheLayout& layout,
                                                           int64_t num_blocks,
                                                           BlockPoolOptions options = {});
  ~BlockPool();

  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;

  const KvCacheLayout& layout() const { return layout_; }
  int64_t num_blocks() const { return static_cast<int64_t>(owner_.size()); }
  // Blocks held by some slot / by none. O(1).
  int64_t num_used() const { return num_used_; }
  int64_t num_free() const { return num_blocks() - num_used_; }

  // True if `block` is a block of this pool.
  bool Contains(BlockId block) const {
    return block.value() >= 0 && block.value() < num_blocks();
  }
  // The slot holding `block`, or nullopt if it is free. REQUIRES: Contains(block).
  std::optional<SeqSlot> owner(BlockId block) const;

  // Gives `block` to `slot`. INVALID_ARGUMENT if the block is not in the pool
  // (foreign) or `slot` is not valid; FAILED_PRECONDITION if some slot
  // (`slot` included) holds it already. Nothing changes on error.
  absl::Status Claim(SeqSlot slot, BlockId block);

  // Takes `block` back from `slot`. INVALID_ARGUMENT if the block is not in
  // the pool; FAILED_PRECONDITION if `slot` does not hold it (a double free,
  // or another slot's block). Nothing changes on error. A mirror pool gives
  // the memory pages that lie wholly inside the block back to the system.
  absl::Status Release(SeqSlot slot, BlockId block);

  // The floats of `block` [block_floats]. REQUIRES: Contains(block). (A
  // mirror pool notes that the block may have been written.)
  std::span<float> block(BlockId block);
  std::span<const float> block(BlockId block) const;

  // Recounts the owners; INTERNAL if the count of used blocks disagrees.
  absl::Status VerifyAccounting() const;

  bool mirror() const { return options_.mirror; }
  // Memory pages given back by Release (mirror pools).
  int64_t pages_returned() const { return pages_returned_; }

 private:
  BlockPool(const KvCacheLayout& layout, int64_t num_blocks, BlockPoolOptions options, float* data,
            size_t mapped_bytes);

  KvCacheLayout layout_;
  BlockPoolOptions options_;
  float* data_ = nullptr;  // [num_blocks, block_floats], mapped_bytes_ mapped
  size_t mapped_bytes_ = 0;
  int64_t pages_returned_ = 0;
  std::vector<int32_t> owner_;  // [num_blocks] slot value, -1 = free
  // Mirror pools: [num_blocks] 1 once the block's writable view was taken
  // since it was last released (only those blocks have pages to give back).
  std::vector<uint8_t> written_;
  int64_t num_used_ = 0;
};

}  // namespace weir::worker::kv_cache

#endif  // WEIR_WORKER_KV_CACHE_BLOCK_POOL_H_
