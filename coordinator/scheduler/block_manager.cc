// coordinator/scheduler/block_manager.cc

#include "coordinator/scheduler/block_manager.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/logging.h"

namespace weir::coordinator::scheduler {

absl::StatusOr<BlockManager> BlockManager::Create(const KvLayout& layout) {
  if (absl::Status s = ValidateKvLayout(layout); !s.ok()) return s;
  return BlockManager(layout);
}

BlockManager::BlockManager(const KvLayout& layout)
    : layout_(layout), ref_count_(layout.num_blocks, 0), pending_count_(layout.num_blocks, 0) {
  free_blocks_.reserve(layout.num_blocks);
  for (int32_t b = layout.num_blocks - 1; b >= 0; --b) free_blocks_.push_back(BlockId(b));
  free_slots_.reserve(layout.num_seq_slots);
  for (int32_t s = layout.num_seq_slots - 1; s >= 0; --s) free_slots_.push_back(SeqSlot(s));
}

void BlockManager::AddRefs(BlockId b, int32_t refs, int32_t pending_refs) {
  int32_t& ref = ref_count_[b.value()];
  int32_t& pend = pending_count_[b.value()];
  const bool was_pending_only = ref > 0 && ref == pend;
  const bool was_free = ref == 0;
  ref += refs;
  pend += pending_refs;
  WEIR_DCHECK(ref >= 0 && pend >= 0 && pend <= ref);
  const bool is_pending_only = ref > 0 && ref == pend;
  pending_blocks_ += static_cast<int>(is_pending_only) - static_cast<int>(was_pending_only);
  if (ref == 0 && !was_free) free_blocks_.push_back(b);
}

bool BlockManager::CanAllocate(int64_t num_tokens, int64_t num_shared_blocks) const {
  if (free_slots_.empty()) return false;
  const int64_t fresh = BlocksForTokens(layout_, num_tokens) - num_shared_blocks;
  return fresh <= num_free_blocks();
}

absl::Status BlockManager::Allocate(RequestId seq, int64_t num_tokens,
                                    absl::Span<const BlockId> shared_prefix) {
  if (num_tokens < 0) {
    return absl::InvalidArgumentError(absl::StrCat("num_tokens must be >= 0, got ", num_tokens));
  }
  const int64_t needed = BlocksForTokens(layout_, num_tokens);
  if (static_cast<int64_t>(shared_prefix.size()) > needed) {
    return absl::InvalidArgumentError(absl::StrCat(shared_prefix.size(),
                                                   " prefix blocks exceed the ", needed, " that ",
                                                   num_tokens, " tokens need"));
  }
  for (BlockId b : shared_prefix) {
    if (b.value() < 0 || b.value() >= layout_.num_blocks || ref_count_[b.value()] == 0) {
      return absl::InvalidArgumentError(absl::StrCat("prefix block ", b.value(), " is not in use"));
    }
  }
  if (seqs_.contains(seq)) {
    return absl::FailedPreconditionError(
        absl::StrCat("sequence ", seq.value(), " already holds KV"));
  }
  const int64_t fresh = needed - static_cast<int64_t>(shared_prefix.size());
  if (free_slots_.empty() || fresh > num_free_blocks()) {
    return absl::ResourceExhaustedError(absl::StrCat("sequence ", seq.value(), " needs a slot and ",
                                                     fresh, " blocks; free: ", free_slots_.size(),
                                                     " slots, ", num_free_blocks(), " blocks"));
  }
  SeqAllocation alloc;
  alloc.slot = free_slots_.back();
  free_slots_.pop_back();
  alloc.num_tokens = num_tokens;
  alloc.blocks.reserve(needed);
  for (BlockId b : shared_prefix) {
    AddRefs(b, 1, 0);
    alloc.blocks.push_back(b);
  }
  for (int64_t i = 0; i < fresh; ++i) {
    const BlockId b = free_blocks_.back();
    free_blocks_.pop_back();
    AddRefs(b, 1, 0);
    alloc.blocks.push_back(b);
  }
  seqs_.emplace(seq, std::move(alloc));
  return absl::OkStatus();
}

bool BlockManager::CanGrow(RequestId seq, int64_t new_len) const {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return false;
  const int64_t fresh =
      BlocksForTokens(layout_, new_len) - static_cast<int64_t>(it->second.blocks.size());
  return fresh <= num_free_blocks();
}

absl::Status BlockManager::Grow(RequestId seq, int64_t new_len) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) {
    return absl::NotFoundError(absl::StrCat("sequence ", seq.value(), " holds no KV"));
  }
  SeqAllocation& alloc = it->second;
  const int64_t fresh =
      BlocksForTokens(layout_, new_len) - static_cast<int64_t>(alloc.blocks.size());
  if (fresh > num_free_blocks()) {
    return absl::ResourceExhaustedError(absl::StrCat("sequence ", seq.value(), " needs ", fresh,
                                                     " more blocks; ", num_free_blocks(), " free"));
  }
  for (int64_t i = 0; i < fresh; ++i) {
    const BlockId b = free_blocks_.back();
    free_blocks_.pop_back();
    AddRefs(b, 1, 0);
    alloc.blocks.push_back(b);
  }
  alloc.num_tokens = std::max(alloc.num_tokens, new_len);
  return absl::OkStatus();
}

const SeqAllocation* BlockManager::Find(RequestId seq) const {
  auto it = seqs_.find(seq);
  return it == seqs_.end() ? nullptr : &it->second;
}

void BlockManager::Drop(const SeqAllocation& alloc, bool pending) {
  for (BlockId b : alloc.blocks) AddRefs(b, -1, pending ? -1 : 0);
  free_slots_.push_back(alloc.slot);
}

absl::Status BlockManager::Free(RequestId seq) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) {
    return absl::NotFoundError(absl::StrCat("sequence ", seq.value(), " holds no KV"));
  }
  Drop(it->second, /*pending=*/false);
  seqs_.erase(it);
  return absl::OkStatus();
}

absl::Status BlockManager::ReleaseAfterStep(RequestId seq, uint64_t last_step) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) {
    return absl::NotFoundError(absl::StrCat("sequence ", seq.value(), " holds no KV"));
  }
  if (last_returned_step_.has_value() && last_step <= *last_returned_step_) {
    Drop(it->second, /*pending=*/false);
  } else {
    for (BlockId b : it->second.blocks) AddRefs(b, 0, 1);
    pending_[last_step].push_back(std::move(it->second));
  }
  seqs_.erase(it);
  return absl::OkStatus();
}

void BlockManager::OnStepReturned(uint64_t step_id) {
  if (last_returned_step_.has_value() && step_id < *last_returned_step_) return;
  last_returned_step_ = step_id;
  while (!pending_.empty() && pending_.begin()->first <= step_id) {
    for (const SeqAllocation& alloc : pending_.begin()->second) Drop(alloc, /*pending=*/true);
    pending_.erase(pending_.begin());
  }
}

absl::Status BlockManager::VerifyAccounting() const {
  std::vector<int32_t> refs(layout_.num_blocks, 0);
  std::vector<int32_t> pend(layout_.num_blocks, 0);
  int64_t slots = 0;
  for (const auto& [id, alloc] : seqs_) {
    ++slots;
    for (BlockId b : alloc.blocks) ++refs[b.value()];
  }
  for (const auto& [step, allocs] : pending_) {
    for (const SeqAllocation& alloc : allocs) {
      ++slots;
      for (BlockId b : alloc.blocks) ++refs[b.value()], ++pend[b.value()];
    }
  }
  int64_t free = 0, pending_only = 0;
  for (int32_t b = 0; b < layout_.num_blocks; ++b) {
    if (refs[b] != ref_count_[b] || pend[b] != pending_count_[b]) {
      return absl::InternalError(absl::StrCat("block ", b, " has ", refs[b], " references (",
                                              pend[b], " pending); books say ", ref_count_[b], " (",
                                              pending_count_[b], ")"));
    }
    free += refs[b] == 0;
    pending_only += refs[b] > 0 && refs[b] == pend[b];
  }
  if (free != num_free_blocks() || pending_only != pending_blocks_) {
    return absl::InternalError(absl::StrCat("free blocks ", free, " vs list ", num_free_blocks(),
                                            "; pending-only ", pending_only, " vs ",
                                            pending_blocks_));
  }
  if (slots + num_free_slots() != layout_.num_seq_slots) {
    return absl::InternalError(absl::StrCat(slots, " slots held + ", num_free_slots(),
                                            " free != ", layout_.num_seq_slots));
  }
  return absl::OkStatus();
}

}  // namespace weir::coordinator::scheduler
