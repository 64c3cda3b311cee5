// coordinator/scheduler/block_manager_test.cc

#include "coordinator/scheduler/block_manager.h"

#include <random>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "gtest/gtest.h"

namespace weir::coordinator::scheduler {
namespace {

KvLayout Layout(int32_t blocks, int32_t slots, int32_t block_tokens = 16,
                std::vector<int32_t> ratios = {1}) {
  KvLayout l;
  l.block_tokens = block_tokens;
  l.compress_ratios = std::move(ratios);
  l.num_blocks = blocks;
  l.num_seq_slots = slots;
  return l;
}

TEST(KvLayoutTest, BlocksFollowTheSmallestRatio) {
  const KvLayout only2 = Layout(8, 2, 64, {2, 2});
  EXPECT_EQ(BlocksForTokens(only2, 0), 0);
  EXPECT_EQ(BlocksForTokens(only2, 1), 0);  // no complete group of 2 yet
  EXPECT_EQ(BlocksForTokens(only2, 2), 1);
  EXPECT_EQ(BlocksForTokens(only2, 65), 1);  // 32 entries fit one block
  EXPECT_EQ(BlocksForTokens(only2, 66), 2);
  const KvLayout mixed = Layout(8, 2, 64, {2, 1});
  EXPECT_EQ(BlocksForTokens(mixed, 65), 2);
  EXPECT_EQ(BlocksForTokens(Layout(8, 2, 64, {}), 1000), 0);
}

TEST(KvLayoutTest, RejectsBadLayouts) {
  EXPECT_EQ(ValidateKvLayout(Layout(8, 2, 64, {3})).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ValidateKvLayout(Layout(8, 0)).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ValidateKvLayout(Layout(-1, 1)).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ValidateKvLayout(Layout(8, 1, 0)).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(BlockManager::Create(Layout(8, 0)).ok());
}

TEST(BlockManagerTest, AllocateGrowFree) {
  BlockManager bm = *BlockManager::Create(Layout(4, 2));
  ASSERT_TRUE(bm.Allocate(RequestId(1), 17).ok());  // 2 blocks
  EXPECT_EQ(bm.num_free_blocks(), 2);
  EXPECT_EQ(bm.Find(RequestId(1))->blocks.size(), 2u);
  EXPECT_TRUE(bm.Grow(RequestId(1), 32).ok());  // still 2 blocks
  EXPECT_EQ(bm.num_free_blocks(), 2);
  EXPECT_TRUE(bm.Grow(RequestId(1), 33).ok());
  EXPECT_EQ(bm.num_free_blocks(), 1);
  EXPECT_EQ(bm.Allocate(RequestId(1), 1).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(bm.Grow(RequestId(2), 1).code(), absl::StatusCode::kNotFound);
  for (BlockId b : bm.Find(RequestId(1))->blocks) EXPECT_EQ(bm.references(b), 1);
  ASSERT_TRUE(bm.Free(RequestId(1)).ok());
  EXPECT_EQ(bm.num_free_blocks(), 4);
  EXPECT_EQ(bm.num_free_slots(), 2);
  for (int32_t b = 0; b < 4; ++b) EXPECT_EQ(bm.references(BlockId(b)), 0);
  EXPECT_EQ(bm.Free(RequestId(1)).code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(bm.VerifyAccounting().ok());
}

TEST(BlockManagerTest, ExhaustionLeavesNothingAllocated) {
  BlockManager bm = *BlockManager::Create(Layout(4, 2));
  ASSERT_TRUE(bm.Allocate(RequestId(1), 48).ok());  // 3 blocks
  EXPECT_FALSE(bm.CanAllocate(32));
  EXPECT_EQ(bm.Allocate(RequestId(2), 32).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(bm.Find(RequestId(2)), nullptr);
  EXPECT_EQ(bm.num_free_slots(), 1);
  EXPECT_EQ(bm.num_free_blocks(), 1);
  EXPECT_EQ(bm.Grow(RequestId(1), 80).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(bm.Find(RequestId(1))->blocks.size(), 3u);
  EXPECT_EQ(bm.num_free_blocks(), 1);
  ASSERT_TRUE(bm.Allocate(RequestId(2), 16).ok());
  EXPECT_FALSE(bm.CanAllocate(0));  // no slot left
  EXPECT_EQ(bm.Allocate(RequestId(3), 0).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(bm.VerifyAccounting().ok());
}

TEST(BlockManagerTest, SharedPrefixKeepsBlocksUntilLastReference) {
  BlockManager bm = *BlockManager::Create(Layout(6, 3));
  ASSERT_TRUE(bm.Allocate(RequestId(1), 32).ok());
  const std::vector<BlockId> prefix = bm.Find(RequestId(1))->blocks;
  EXPECT_TRUE(bm.CanAllocate(48, 2));
  ASSERT_TRUE(bm.Allocate(RequestId(2), 48, prefix).ok());
  EXPECT_EQ(bm.Find(RequestId(2))->blocks[0], prefix[0]);
  EXPECT_EQ(bm.num_free_blocks(), 3);
  ASSERT_TRUE(bm.Free(RequestId(1)).ok());
  EXPECT_EQ(bm.num_free_blocks(), 3);  // still referenced by 2
  ASSERT_TRUE(bm.Free(RequestId(2)).ok());
  EXPECT_EQ(bm.num_free_blocks(), 6);
  EXPECT_EQ(bm.Allocate(RequestId(3), 16, prefix).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bm.Allocate(RequestId(3), 16, {BlockId(99)}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bm.Allocate(RequestId(3), -1).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(bm.VerifyAccounting().ok());
}

TEST(BlockManagerTest, DeferredReleaseWaitsForTheLastStep) {
  BlockManager bm = *BlockManager::Create(Layout(4, 2));
  ASSERT_TRUE(bm.Allocate(RequestId(1), 64).ok());
  ASSERT_TRUE(bm.ReleaseAfterStep(RequestId(1), 7).ok());
  EXPECT_EQ(bm.Find(RequestId(1)), nullptr);  // the id may be reused at once
  EXPECT_EQ(bm.num_free_blocks(), 0);
  EXPECT_EQ(bm.num_pending_release_blocks(), 4);
  EXPECT_EQ(bm.num_free_slots(), 1);
  bm.OnStepReturned(6);
  EXPECT_EQ(bm.num_free_blocks(), 0);
  bm.OnStepReturned(7);
  EXPECT_EQ(bm.num_free_blocks(), 4);
  EXPECT_EQ(bm.num_pending_release_blocks(), 0);
  EXPECT_EQ(bm.num_free_slots(), 2);
  // A release for a step that already returned is immediate.
  ASSERT_TRUE(bm.Allocate(RequestId(1), 16).ok());
  ASSERT_TRUE(bm.ReleaseAfterStep(RequestId(1), 7).ok());
  EXPECT_EQ(bm.num_free_blocks(), 4);
  EXPECT_EQ(bm.ReleaseAfterStep(RequestId(1), 9).code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(bm.VerifyAccounting().ok());
}

TEST(BlockManagerTest, PendingCountIgnoresBlocksStillShared) {
  BlockManager bm = *BlockManager::Create(Layout(4, 2));
  ASSERT_TRUE(bm.Allocate(RequestId(1), 32).ok());
  const std::vector<BlockId> prefix = {bm.Find(RequestId(1))->blocks[0]};
  ASSERT_TRUE(bm.Allocate(RequestId(2), 32, prefix).ok());
  ASSERT_TRUE(bm.ReleaseAfterStep(RequestId(1), 3).ok());
  EXPECT_EQ(bm.num_pending_release_blocks(), 1);  // the unshared one
  bm.OnStepReturned(3);
  EXPECT_EQ(bm.num_free_blocks(), 2);
  EXPECT_TRUE(bm.VerifyAccounting().ok());
}

// 10^5 random allocate / grow / free / deferred-release / step events: the
// books match a recount after every event and drain back to all-free.
TEST(BlockManagerTest, RandomEventsNeverLeak) {
  BlockManager bm = *BlockManager::Create(Layout(64, 12, 8, {2, 1}));
  std::mt19937_64 rng(12345);
  std::vector<uint64_t> live;
  uint64_t next_id = 0, step = 0;
  for (int event = 0; event < 100000; ++event) {
    const int kind = static_cast<int>(rng() % 6);
    if (kind == 0 || live.empty()) {
      std::vector<BlockId> prefix;
      if (!live.empty() && rng() % 4 == 0) {
        const auto& blocks = bm.Find(RequestId(live[rng() % live.size()]))->blocks;
        prefix.assign(blocks.begin(),
                      blocks.begin() + static_cast<long>(rng() % (blocks.size() + 1)));
      }
      const int64_t len =
          static_cast<int64_t>(prefix.size()) * 8 + static_cast<int64_t>(rng() % 40);
      const bool can = bm.CanAllocate(len, static_cast<int64_t>(prefix.size()));
      const int64_t free_before = bm.num_free_blocks();
      absl::Status s = bm.Allocate(RequestId(next_id), len, prefix);
      ASSERT_EQ(can, s.ok()) << s;
      if (s.ok()) live.push_back(next_id);
      if (!s.ok()) {
        ASSERT_EQ(bm.num_free_blocks(), free_before);
      }
      ++next_id;
    } else if (kind == 1) {
      const RequestId id(live[rng() % live.size()]);
      const int64_t len = bm.Find(id)->num_tokens + static_cast<int64_t>(rng() % 20);
      ASSERT_EQ(bm.CanGrow(id, len), bm.Grow(id, len).ok());
    } else if (kind == 2 || kind == 3) {
      const size_t i = rng() % live.size();
      absl::Status s = kind == 2 ? bm.Free(RequestId(live[i]))
                                 : bm.ReleaseAfterStep(RequestId(live[i]), step + rng() % 3);
      ASSERT_TRUE(s.ok()) << s;
      live.erase(live.begin() + static_cast<long>(i));
    } else {
      bm.OnStepReturned(step++);
    }
    ASSERT_EQ(bm.num_free_blocks() + bm.num_used_blocks(), bm.num_blocks());
    if (event % 97 == 0) {
      ASSERT_TRUE(bm.VerifyAccounting().ok()) << bm.VerifyAccounting();
    }
  }
  for (uint64_t id : live) ASSERT_TRUE(bm.ReleaseAfterStep(RequestId(id), step).ok());
  bm.OnStepReturned(step + 5);
  EXPECT_TRUE(bm.VerifyAccounting().ok());
  EXPECT_EQ(bm.num_free_blocks(), bm.num_blocks());
  EXPECT_EQ(bm.num_free_slots(), 12);
  EXPECT_EQ(bm.num_pending_release_blocks(), 0);
}

}  // namespace
}  // namespace weir::coordinator::scheduler
