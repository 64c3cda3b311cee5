#include "worker/kv_cache/paged_kv_store.h"

#include <memory>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "worker/kv_cache/test_layout.h"

namespace weir::worker::kv_cache {
namespace {

KvCacheLayout SmallLayout() { return SmallTestLayout(); }

// Distinct values for entries [first, first + count) of `layer`.
std::vector<float> Rows(int layer, int64_t first, int64_t count, int64_t dim, float sign) {
  std::vector<float> rows(count * dim);
  for (int64_t e = 0; e < count; ++e) {
    for (int64_t k = 0; k < dim; ++k) {
      rows[e * dim + k] = sign * static_cast<float>(layer * 10000 + (first + e) * 10 + k);
    }
  }
  return rows;
}

TEST(PagedKvStoreTest, EntriesGoThroughTheTableInPositionOrder) {
  auto pool = *BlockPool::Create(SmallLayout(), 8);
  PagedKvStore store(*pool, SeqSlot(0));
  const std::vector<BlockId> table = {BlockId(5), BlockId(2), BlockId(7)};  // not contiguous
  ASSERT_TRUE(store.AddBlocks(table).ok());
  EXPECT_EQ(store.covered_positions(), 12);
  model::DenseKvStore dense({{4, 2}, {0, 0}, {4, 2}});
  // Layer 0 (4 entries a block): chunks of 3, 1, 5 entries straddle blocks.
  for (auto [first, count] : {std::pair{0, 3}, {3, 1}, {4, 5}}) {
    const auto kv = Rows(0, first, count, 4, 1), keys = Rows(0, first, count, 2, -1);
    ASSERT_TRUE(store.Append(0, kv, keys).ok());
    ASSERT_TRUE(dense.Append(0, kv, keys).ok());
  }
  // Layer 2 (2 entries a block): 5 entries.
  ASSERT_TRUE(store.Append(2, Rows(2, 0, 5, 4, 1), Rows(2, 0, 5, 2, -1)).ok());
  ASSERT_TRUE(dense.Append(2, Rows(2, 0, 5, 4, 1), Rows(2, 0, 5, 2, -1)).ok());
  EXPECT_EQ(store.entries(0), 9);
  EXPECT_EQ(store.entries(2), 5);
  // Every sub-range reads back as the dense store has it.
  for (int layer : {0, 2}) {
    const int64_t n = store.entries(layer);
    for (int64_t first = 0; first < n; ++first) {
      for (int64_t count = 1; first + count <= n; ++count) {
        std::vector<float> a(count * 4), b(count * 4), ka(count * 2), kb(count * 2);
        store.ReadKv(layer, first, a);
        dense.ReadKv(layer, first, b);
        store.ReadIndexK(layer, first, ka);
        dense.ReadIndexK(layer, first, kb);
        ASSERT_EQ(a, b) << layer << " " << first << " " << count;
        ASSERT_EQ(ka, kb) << layer << " " << first << " " << count;
      }
    }
  }
  // Entry 4 of layer 0 is the first of the table's second block (block 2),
  // entry 2 of layer 2 the first of block 2's layer-2 region.
  EXPECT_EQ(pool->block(BlockId(2))[0], 40.0f);
  EXPECT_EQ(pool->block(BlockId(2))[16], -40.0f);
  EXPECT_EQ(pool->block(BlockId(2))[24], 20020.0f);
}

TEST(PagedKvStoreTest, AnAppendBeyondTheTableWritesNothing) {
  auto pool = *BlockPool::Create(SmallLayout(), 4);
  PagedKvStore store(*pool, SeqSlot(1));
  ASSERT_TRUE(store.AddBlocks(std::vector<BlockId>{BlockId(3)}).ok());
  ASSERT_TRUE(store.Append(0, Rows(0, 0, 3, 4, 1), Rows(0, 0, 3, 2, 1)).ok());
  const std::vector<float> before(pool->block(BlockId(3)).begin(), pool->block(BlockId(3)).end());
  absl::Status full = store.Append(0, Rows(0, 3, 2, 4, 1), Rows(0, 3, 2, 2, 1));
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(store.entries(0), 3);
  EXPECT_TRUE(std::equal(before.begin(), before.end(), pool->block(BlockId(3)).begin()));
  // More blocks make room.
  ASSERT_TRUE(store.AddBlocks(std::vector<BlockId>{BlockId(0)}).ok());
  EXPECT_TRUE(store.Append(0, Rows(0, 3, 2, 4, 1), Rows(0, 3, 2, 2, 1)).ok());
  EXPECT_EQ(store.entries(0), 5);
}

TEST(PagedKvStoreTest, TablesClaimAndReturnTheirBlocks) {
  auto pool = *BlockPool::Create(SmallLayout(), 6);
  {
    PagedKvStore a(*pool, SeqSlot(0));
    PagedKvStore b(*pool, SeqSlot(1));
    ASSERT_TRUE(a.AddBlocks(std::vector<BlockId>{BlockId(0), BlockId(1)}).ok());
    EXPECT_EQ(pool->num_used(), 2);
    // A block another table holds is refused, and the whole call is undone.
    absl::Status taken = b.AddBlocks(std::vector<BlockId>{BlockId(2), BlockId(1)});
    EXPECT_EQ(taken.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_TRUE(b.blocks().empty());
    EXPECT_EQ(pool->owner(BlockId(2)), std::nullopt);
    // A foreign block, and the same block twice in one call.
    EXPECT_EQ(b.AddBlocks(std::vector<BlockId>{BlockId(6)}).code(),
              absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(b.AddBlocks(std::vector<BlockId>{BlockId(4), BlockId(4)}).code(),
              absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ(pool->num_used(), 2);
    ASSERT_TRUE(b.AddBlocks(std::vector<BlockId>{BlockId(4)}).ok());
    // Truncate and re-append (a rollback), then release all.
    ASSERT_TRUE(a.Append(0, Rows(0, 0, 6, 4, 1), Rows(0, 0, 6, 2, 1)).ok());
    a.Truncate(0, 2);
    ASSERT_TRUE(a.Append(0, Rows(0, 2, 1, 4, -1), Rows(0, 2, 1, 2, -1)).ok());
    std::vector<float> row(4);
    a.ReadKv(0, 2, row);
    EXPECT_EQ(row, Rows(0, 2, 1, 4, -1));
    a.ReleaseAll();
    EXPECT_EQ(a.entries(0), 0);
    EXPECT_TRUE(a.blocks().empty());
    EXPECT_EQ(pool->num_used(), 1);
    ASSERT_TRUE(a.AddBlocks(std::vector<BlockId>{BlockId(1)}).ok());
    EXPECT_EQ(pool->num_used(), 2);
  }
  // Destruction returns every block.
  EXPECT_EQ(pool->num_used(), 0);
  EXPECT_TRUE(pool->VerifyAccounting().ok());
}

TEST(PagedKvStoreTest, InterleavedSequencesKeepTheirOwnEntries) {
  auto pool = *BlockPool::Create(SmallLayout(), 64);
  std::mt19937 rng(5);
  std::vector<int32_t> free_blocks(64);
  for (int32_t b = 0; b < 64; ++b) free_blocks[b] = b;
  std::shuffle(free_blocks.begin(), free_blocks.end(), rng);
  std::vector<std::unique_ptr<PagedKvStore>> stores;
  std::vector<std::unique_ptr<model::DenseKvStore>> dense;
  for (int s = 0; s < 4; ++s) {
    stores.push_back(std::make_unique<PagedKvStore>(*pool, SeqSlot(s)));
    dense.push_back(std::make_unique<model::DenseKvStore>(
        std::vector<model::DenseKvStore::LayerDims>{{4, 2}, {0, 0}, {4, 2}}));
  }
  std::vector<int64_t> positions(4, 0);
  for (int round = 0; round < 40; ++round) {
    const int s = static_cast<int>(rng() % 4);
    const int64_t add = 1 + rng() % 5;
    const int64_t end = positions[s] + add;
    while (stores[s]->covered_positions() < end) {
      ASSERT_FALSE(free_blocks.empty());
      ASSERT_TRUE(stores[s]->AddBlocks(std::vector<BlockId>{BlockId(free_blocks.back())}).ok());
      free_blocks.pop_back();
    }
    for (int layer : {0, 2}) {
      const int ratio = layer == 0 ? 1 : 2;
      const int64_t first = positions[s] / ratio, count = end / ratio - first;
      const auto kv = Rows(layer + 100 * s, first, count, 4, 1);
      const auto keys = Rows(layer + 100 * s, first, count, 2, -1);
      ASSERT_TRUE(stores[s]->Append(layer, kv, keys).ok());
      ASSERT_TRUE(dense[s]->Append(layer, kv, keys).ok());
    }
    positions[s] = end;
  }
  for (int s = 0; s < 4; ++s) {
    for (int layer : {0, 2}) {
      const int64_t n = stores[s]->entries(layer);
      ASSERT_EQ(n, dense[s]->entries(layer));
      std::vector<float> a(n * 4), b(n * 4);
      stores[s]->ReadKv(layer, 0, a);
      dense[s]->ReadKv(layer, 0, b);
      ASSERT_EQ(a, b) << "sequence " << s << " layer " << layer;
    }
  }
}

}  // namespace
}  // namespace weir::worker::kv_cache
