// coordinator/scheduler/block_manager.h
//
// BlockManager: the coordinator's exact book of one DP rank's KV memory —
// which sequence holds which sequence slot and which paged blocks, how many
// references each block has, and which releases wait for an in-flight step.
// It moves no bytes; the worker mirrors it from the plans it is sent.
//
// Thread safety: not thread-safe. Owned by one RankScheduler, used on the
// step-loop thread only.

#ifndef WEIR_COORDINATOR_SCHEDULER_BLOCK_MANAGER_H_
#define WEIR_COORDINATOR_SCHEDULER_BLOCK_MANAGER_H_

#include <cstdint>
#include <map>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "base/strong_id.h"
#include "coordinator/scheduler/kv_layout.h"

namespace weir::coordinator::scheduler {

// What one live sequence holds.
struct SeqAllocation {
  SeqSlot slot;
  // Block table in position order: block i covers positions
  // [i * block_tokens, (i + 1) * block_tokens).
  std::vector<BlockId> blocks;
  // Positions the blocks were sized for (Allocate / Grow argument, max so far).
  int64_t num_tokens = 0;
};

// Usage:
//   ASSIGN_OR_RETURN(BlockManager bm, BlockManager::Create(layout));
//   if (bm.CanAllocate(prompt_len)) RETURN_IF_ERROR(bm.Allocate(id, prompt_len));
//   RETURN_IF_ERROR(bm.Grow(id, prompt_len + 1));      // before each decode row
//   RETURN_IF_ERROR(bm.ReleaseAfterStep(id, last_step_that_used_it));
//   bm.OnStepReturned(step_id);                          // on every StepResult
//
// Invariants: num_free_blocks() + num_used_blocks() == num_blocks(); a block
// is free iff its reference count is 0; a slot is free iff no live or
// pending-release sequence holds it. Every failed call changes nothing.
class BlockManager {
 public:
  // Returns a manager with every block and slot free, or INVALID_ARGUMENT
  // if `layout` fails ValidateKvLayout.
  static absl::StatusOr<BlockManager> Create(const KvLayout& layout);

  BlockManager(BlockManager&&) = default;
  BlockManager& operator=(BlockManager&&) = default;

  const KvLayout& layout() const { return layout_; }
  int64_t num_blocks() const { return layout_.num_blocks; }
  // Blocks with reference count 0. O(1).
  int64_t num_free_blocks() const { return static_cast<int64_t>(free_blocks_.size()); }
  // Blocks held by live sequences or waiting for a deferred release. O(1).
  int64_t num_used_blocks() const { return num_blocks() - num_free_blocks(); }
  // Blocks whose last reference is a pending (deferred) release: they become
  // free by OnStepReturned of the latest step passed to ReleaseAfterStep.
  int64_t num_pending_release_blocks() const { return pending_blocks_; }
  int64_t num_free_slots() const { return static_cast<int64_t>(free_slots_.size()); }
  int64_t num_live_sequences() const { return static_cast<int64_t>(seqs_.size()); }

  // Returns true if Allocate(seq, num_tokens, prefix) would succeed for a new
  // sequence with a shared prefix of `num_shared_blocks` blocks: a free slot
  // and BlocksForTokens(num_tokens) - num_shared_blocks free blocks.
  bool CanAllocate(int64_t num_tokens, int64_t num_shared_blocks = 0) const;

  // Gives `seq` a slot and the blocks for `num_tokens` positions. The first
  // blocks are `shared_prefix` (each gains a reference; prefix caching), the
  // rest are fresh. Errors (nothing allocated on any):
  //   INVALID_ARGUMENT   num_tokens < 0, a prefix block out of range or not
  //                      in use, or more prefix blocks than num_tokens needs;
  //   FAILED_PRECONDITION `seq` already holds an allocation;
  //   RESOURCE_EXHAUSTED no free slot or too few free blocks.
  absl::Status Allocate(RequestId seq, int64_t num_tokens,
                        absl::Span<const BlockId> shared_prefix = {});

  // Returns true if Grow(seq, new_len) would succeed.
  bool CanGrow(RequestId seq, int64_t new_len) const;

  // Adds fresh blocks to `seq` so it covers `new_len` positions; a no-op if
  // it already does. Errors (nothing allocated): NOT_FOUND for an unknown
  // `seq`; RESOURCE_EXHAUSTED if too few blocks are free.
  absl::Status Grow(RequestId seq, int64_t new_len);

  // References to `block` (live sequences and pending releases); 0 = free.
  // REQUIRES: 0 <= block < num_blocks().
  int32_t references(BlockId block) const { return ref_count_[block.value()]; }

  // Returns the allocation of `seq`, or null if it holds none. The pointer is
  // valid until the next non-const call.
  const SeqAllocation* Find(RequestId seq) const;

  // Drops the references and slot of `seq` now. NOT_FOUND if it holds none.
  // Use only when no in-flight step uses the sequence (else ReleaseAfterStep).
  absl::Status Free(RequestId seq);

  // Detaches the allocation of `seq` at once (the id may be allocated again
  // right away) and drops its references and slot when step `last_step` has
  // returned; at once if OnStepReturned(s >= last_step) was already called.
  // NOT_FOUND if `seq` holds nothing.
  absl::Status ReleaseAfterStep(RequestId seq, uint64_t last_step);

  // Records that step `step_id` returned and completes every deferred
  // release due at or before it. Steps return in increasing order; a call
  // with an older id than a previous one is ignored.
  void OnStepReturned(uint64_t step_id);

  // Recounts references from every block table and pending release and
  // compares with the books; INTERNAL with the first mismatch. O(blocks).
  absl::Status VerifyAccounting() const;

 private:
  explicit BlockManager(const KvLayout& layout);
  // Applies reference-count deltas to block `b`, keeping the free list and
  // pending_blocks_ exact.
  void AddRefs(BlockId b, int32_t refs, int32_t pending_refs);
  // Drops every reference of `alloc` (pending ones if `pending`) and its slot.
  void Drop(const SeqAllocation& alloc, bool pending);

  KvLayout layout_;
  std::vector<int32_t> ref_count_;      // [num_blocks] all references
  std::vector<int32_t> pending_count_;  // [num_blocks] references in pending_
  std::vector<BlockId> free_blocks_;    // LIFO stack (recently freed reused first)
  std::vector<SeqSlot> free_slots_;     // LIFO stack
  absl::flat_hash_map<RequestId, SeqAllocation> seqs_;
  std::map<uint64_t, std::vector<SeqAllocation>> pending_;  // by last step
  int64_t pending_blocks_ = 0;  // blocks whose only references are in pending_
  std::optional<uint64_t> last_returned_step_;
};

}  // namespace weir::coordinator::scheduler

#endif  // WEIR_COORDINATOR_SCHEDULER_BLOCK_MANAGER_H_
