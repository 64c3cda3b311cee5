#include "worker/kv_cache/block_pool.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"

namespace weir::worker::kv_cache {

absl::StatusOr<std::unique_ptr<BlockPool>> BlockPool::Create(const KvCacheLayout& layout,
                                                             int64_t num_blocks,
                                                             BlockPoolOptions options) {
  if (num_blocks < 0 || num_blocks > std::numeric_limits<int32_t>::max()) {
    return absl::InvalidArgumentError(
        absl::StrCat("a KV block pool holds 0 to 2^31 - 1 blocks, not ", num_blocks));
  }
  const size_t bytes = static_cast<size_t>(num_blocks * layout.block_floats) * sizeof(float);
  float* data = nullptr;
  if (bytes > 0) {
    // Address space only: no swap reserved, a page backed when first written.
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
      return absl::ResourceExhaustedError(absl::StrCat("cannot map ", num_blocks, " KV blocks of ",
                                                       layout.block_bytes(),
                                                       " bytes: ", std::strerror(errno)));
    }
    data = static_cast<float*>(p);
  }
  return std::unique_ptr<BlockPool>(new BlockPool(layout, num_blocks, options, data, bytes));
}

BlockPool::BlockPool(const KvCacheLayout& layout, int64_t num_blocks, BlockPoolOptions options,
                     float* data, size_t mapped_bytes)
    : layout_(layout),
      options_(options),
      data_(data),
      mapped_bytes_(mapped_bytes),
      owner_(num_blocks, -1),
      written_(options.mirror ? num_blocks : 0, 0) {}

BlockPool::~BlockPool() {
  if (data_ != nullptr) munmap(data_, mapped_bytes_);
}

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
  if (options_.mirror && written_[block.value()]) {
    written_[block.value()] = 0;
    // The pages wholly inside the block (its neighbours may be in use).
    // (The const view: the writable one would mark the block written again.)
    const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
    const std::span<const float> b = std::as_const(*this).block(block);
    const uintptr_t begin = (reinterpret_cast<uintptr_t>(b.data()) + page - 1) / page * page;
    const uintptr_t end = reinterpret_cast<uintptr_t>(b.data() + b.size()) / page * page;
    if (end > begin && madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED) == 0) {
      pages_returned_ += static_cast<int64_t>((end - begin) / page);
    }
  }
  return absl::OkStatus();
}

std::span<float> BlockPool::block(BlockId block) {
  if (options_.mirror) written_[block.value()] = 1;
  return {data_ + block.value() * layout_.block_floats, static_cast<size_t>(layout_.block_floats)};
}

std::span<const float> BlockPool::block(BlockId block) const {
  return {data_ + block.value() * layout_.block_floats, static_cast<size_t>(layout_.block_floats)};
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
