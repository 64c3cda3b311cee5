#include "worker/kv_cache/block_pool.h"

#include <limits>
#include <new>
#include <utility>

#include "absl/strings/str_cat.h"

namespace weir::worker::kv_cache {

absl::StatusOr<std::unique_ptr<BlockPool>> BlockPool::Create(const KvCacheLayout& layout,
                                                             int64_t num_blocks) {
  if (num_blocks < 0 || num_blocks > std::numeric_limits<int32_t>::max()) {
    return absl::InvalidArgumentError(
        absl::StrCat("a KV block pool holds 0 to 2^31 - 1 blocks, not ", num_blocks));
  }
  const int64_t floats = num_blocks * layout.block_floats;
  // Not value-initialized: untouched pages stay unbacked until a block is written.
  std::unique_ptr<float[]> data(floats > 0 ? new (std::nothrow) float[floats] : nullptr);
  if (floats > 0 && data == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat("cannot allocate ", num_blocks,
                                                     " KV blocks of ", layout.block_bytes(),
                                                     " bytes"));
  }
  return std::unique_ptr<BlockPool>(new BlockPool(layout, num_blocks, std::move(data)));
}

BlockPool::BlockPool(const KvCacheLayout& layout, int64_t num_blocks,
                     std::unique_ptr<float[]> data)
    : layout_(layout), data_(std::move(data)), owner_(num_blocks, -1) {}

std::optional<SeqSlot> BlockPool::owner(BlockId block) const {
  const int32_t o = owner_[block.value()];
  return o < 0 ? std::nullopt : std::optional<SeqSlot>(SeqSlot(o));
}

absl::Status BlockPool::Claim(SeqSlot slot, BlockId block) {
  if (!Contains(block)) {
    return absl::InvalidArgumentError(absl::StrCat("KV block ", block.value(),
                                                   " is not in this pool of ", num_blocks(),
                                                   " blocks"));
  }
  if (slot.value() < 0) {
    return absl::InvalidArgumentError(absl::StrCat("KV block ", block.value(),
                                                   " claimed by invalid slot ", slot.value()));
  }
  int32_t& o = owner_[block.value()];
  if (o >= 0) {
    return absl::FailedPreconditionError(absl::StrCat("KV block ", block.value(),
                                                      " given to slot ", slot.value(),
                                                      " is still held by slot ", o));
  }
  o = slot.value();
  ++num_used_;
  return absl::OkStatus();
}

absl::Status BlockPool::Release(SeqSlot slot, BlockId block) {
  if (!Contains(block)) {
    return absl::InvalidArgumentError(absl::StrCat("KV block ", block.value(),
                                                   " is not in this pool of ", num_blocks(),
                                                   " blocks"));
  }
  int32_t& o = owner_[block.value()];
  if (o != slot.value()) {
    return absl::FailedPreconditionError(
        o < 0 ? absl::StrCat("KV block ", block.value(), " released by slot ", slot.value(),
                             " is free already (double free)")
              : absl::StrCat("KV block ", block.value(), " released by slot ", slot.value(),
                             " is held by slot ", o));
  }
  o = -1;
  --num_used_;
  return absl::OkStatus();
}

std::span<float> BlockPool::block(BlockId block) {
  return {data_.get() + block.value() * layout_.block_floats,
          static_cast<size_t>(layout_.block_floats)};
}

std::span<const float> BlockPool::block(BlockId block) const {
  return {data_.get() + block.value() * layout_.block_floats,
          static_cast<size_t>(layout_.block_floats)};
}

absl::Status BlockPool::VerifyAccounting() const {
  int64_t used = 0;
  for (int32_t o : owner_) used += o >= 0;
  if (used != num_used_) {
    return absl::InternalError(
        absl::StrCat(used, " KV blocks have an owner; the count says ", num_used_));
  }
  return absl::OkStatus();
}

}  // namespace weir::worker::kv_cache
