#include "worker/kv_cache/block_pool.h"

#include <utility>

#include "gtest/gtest.h"
#include "worker/kv_cache/test_layout.h"

namespace weir::worker::kv_cache {
namespace {

KvCacheLayout SmallLayout() { return SmallTestLayout(); }

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
