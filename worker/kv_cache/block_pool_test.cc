#include "worker/kv_cache/block_pool.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <utility>

#include "gtest/gtest.h"
#include "worker/kv_cache/test_layout.h"

namespace weir::worker::kv_cache {
namespace {

KvCacheLayout SmallLayout() { return SmallTestLayout(); }

// The small layout with blocks of `floats` floats (the pool reads only that).
KvCacheLayout WideLayout(int64_t floats) {
  KvCacheLayout layout = SmallTestLayout();
  layout.block_floats = floats;
  return layout;
}

// This process's resident memory in bytes (/proc/self/statm), or -1.
int64_t ResidentBytes() {
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return -1;
  long size = 0, resident = -1;
  if (std::fscanf(f, "%ld %ld", &size, &resident) != 2) resident = -1;
  std::fclose(f);
  return resident < 0 ? -1 : resident * sysconf(_SC_PAGESIZE);
}

TEST(BlockPoolTest, ClaimAndRelease) {
  auto pool = *BlockPool::Create(SmallLayout(), 4);
  EXPECT_EQ(pool->num_blocks(), 4);
  EXPECT_EQ(pool->num_free(), 4);
  ASSERT_TRUE(pool->Claim(SeqSlot(1), BlockId(2)).ok());
  ASSERT_TRUE(pool->Claim(SeqSlot(0), BlockId(0)).ok());
  EXPECT_EQ(pool->num_used(), 2);
  EXPECT_EQ(pool->owner(BlockId(2)), SeqSlot(1));
  EXPECT_EQ(pool->owner(BlockId(1)), std::nullopt);
  ASSERT_TRUE(pool->Release(SeqSlot(1), BlockId(2)).ok());
  EXPECT_EQ(pool->owner(BlockId(2)), std::nullopt);
  EXPECT_EQ(pool->num_used(), 1);
  // A released block may go to another slot.
  ASSERT_TRUE(pool->Claim(SeqSlot(3), BlockId(2)).ok());
  EXPECT_TRUE(pool->VerifyAccounting().ok());
}

// A pool is address space, not memory: 8 GiB of blocks cost no resident
// memory until written, and then only the pages written.
TEST(BlockPoolTest, BlocksAreBackedOnlyWhenWritten) {
  const int64_t before = ResidentBytes();
  ASSERT_GT(before, 0);
  auto pool = BlockPool::Create(WideLayout(1 << 20), 2048);  // 4 MiB a block
  ASSERT_TRUE(pool.ok()) << pool.status();
  EXPECT_LT(ResidentBytes() - before, 32 << 20);
  std::span<float> b = (*pool)->block(BlockId(1000));
  std::fill(b.begin(), b.end(), 1.0f);
  const int64_t grown = ResidentBytes() - before;
  EXPECT_GE(grown, 4 << 20);
  EXPECT_LT(grown, 40 << 20);
}

// A mirror pool (a CUDA worker's host copy of its device's blocks) gives a
// released block's whole pages back to the system: they read as zeros when
// touched again, its neighbours keep their contents. An ordinary pool keeps
// a released block's contents (a CPU worker reuses its blocks at once).
TEST(BlockPoolTest, MirrorPoolReturnsReleasedPages) {
  const int64_t page = sysconf(_SC_PAGESIZE);
  const int64_t floats = 5 * page / static_cast<int64_t>(sizeof(float)) + 3;  // 5 pages and a bit
  for (bool mirror : {false, true}) {
    auto pool = *BlockPool::Create(WideLayout(floats), 4, {.mirror = mirror});
    EXPECT_EQ(pool->mirror(), mirror);
    for (int b = 0; b < 3; ++b) {
      ASSERT_TRUE(pool->Claim(SeqSlot(b), BlockId(b)).ok());
      std::span<float> x = pool->block(BlockId(b));
      std::fill(x.begin(), x.end(), static_cast<float>(b + 1));
    }
    ASSERT_TRUE(pool->Release(SeqSlot(1), BlockId(1)).ok());
    const std::span<const float> released = pool->block(BlockId(1));
    const int64_t zeros = std::count(released.begin(), released.end(), 0.0f);
    if (mirror) {
      // At least 4 whole pages lie inside a block of 5 pages and a bit.
      EXPECT_GE(pool->pages_returned(), 4);
      EXPECT_GE(zeros, 4 * page / static_cast<int64_t>(sizeof(float)));
      EXPECT_LT(zeros, floats);  // the floats on pages shared with a neighbour stay
    } else {
      EXPECT_EQ(pool->pages_returned(), 0);
      EXPECT_EQ(zeros, 0);
    }
    for (int b : {0, 2}) {
      const std::span<const float> x = pool->block(BlockId(b));
      EXPECT_EQ(std::count(x.begin(), x.end(), static_cast<float>(b + 1)), floats)
          << "block " << b << (mirror ? " (mirror)" : "");
    }
    // The released block serves again.
    ASSERT_TRUE(pool->Claim(SeqSlot(3), BlockId(1)).ok());
    pool->block(BlockId(1))[0] = 7.0f;
    EXPECT_EQ(pool->block(BlockId(1))[0], 7.0f);
    EXPECT_TRUE(pool->VerifyAccounting().ok());
  }
}

TEST(BlockPoolTest, DoubleOwnershipDoubleFreeAndForeignBlocksAreRefused) {
  auto pool = *BlockPool::Create(SmallLayout(), 4);
  ASSERT_TRUE(pool->Claim(SeqSlot(1), BlockId(2)).ok());
  // Double ownership: another slot, or the same slot again.
  absl::Status taken = pool->Claim(SeqSlot(0), BlockId(2));
  EXPECT_EQ(taken.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(taken.message().find("still held by slot 1"), std::string::npos) << taken;
  EXPECT_EQ(pool->Claim(SeqSlot(1), BlockId(2)).code(), absl::StatusCode::kFailedPrecondition);
  // Foreign blocks (outside the pool) and invalid slots.
  EXPECT_EQ(pool->Claim(SeqSlot(0), BlockId(4)).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(pool->Claim(SeqSlot(0), BlockId(-1)).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(pool->Claim(SeqSlot(), BlockId(1)).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(pool->Release(SeqSlot(1), BlockId(9)).code(), absl::StatusCode::kInvalidArgument);
  // Releasing another slot's block, and a double free.
  EXPECT_EQ(pool->Release(SeqSlot(0), BlockId(2)).code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(pool->Release(SeqSlot(1), BlockId(2)).ok());
  absl::Status again = pool->Release(SeqSlot(1), BlockId(2));
  EXPECT_EQ(again.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(again.message().find("double free"), std::string::npos) << again;
  // None of the refusals changed anything.
  EXPECT_EQ(pool->num_used(), 0);
  EXPECT_TRUE(pool->VerifyAccounting().ok());
}

TEST(BlockPoolTest, BlocksAreDisjointViews) {
  const KvCacheLayout layout = SmallLayout();
  auto pool = *BlockPool::Create(layout, 3);
  for (int b = 0; b < 3; ++b) {
    std::span<float> data = pool->block(BlockId(b));
    ASSERT_EQ(static_cast<int64_t>(data.size()), layout.block_floats);
    for (float& v : data) v = static_cast<float>(b);
  }
  for (int b = 0; b < 3; ++b) {
    for (float v : std::as_const(*pool).block(BlockId(b))) ASSERT_EQ(v, b);
  }
}

TEST(BlockPoolTest, SizesOutsideTheIdRangeAreRefused) {
  EXPECT_EQ(BlockPool::Create(SmallLayout(), -1).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(BlockPool::Create(SmallLayout(), int64_t{1} << 31).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto empty = BlockPool::Create(SmallLayout(), 0);
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ((*empty)->Claim(SeqSlot(0), BlockId(0)).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace weir::worker::kv_cache
