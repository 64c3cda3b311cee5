#include "worker/kv_cache/paged_kv_store.h"

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <span>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/quant.h"
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

// A packed layout (the stored form): quantized rows read back bit for bit
// through a non-contiguous table, in 7.2x fewer bytes than fp32 at tiny's
// dims; a row that is not a value of its format is refused and writes nothing.
TEST(PagedKvStoreTest, PackedBlocksHoldTheStoredFormExactly) {
  KvCacheLayout layout;
  layout.block_tokens = 4;
  layout.packed = true;
  layout.layer_index = {0};
  KvLayerLayout l{.layer = 0, .ratio = 1, .kv_dim = 128, .index_dim = 64,
                  .entries_per_block = 4, .kv_offset = 0,
                  .kv_entry_bytes = PackedKvEntryBytes(128),
                  .index_entry_bytes = PackedIndexEntryBytes(64)};
  l.index_offset = 4 * l.kv_entry_bytes;
  layout.block_floats = (l.index_offset + 4 * l.index_entry_bytes + 3) / 4;
  layout.layers.push_back(l);
  EXPECT_EQ(layout.block_bytes(), 4 * (72 + 34));
  auto pool = *BlockPool::Create(layout, 6);
  PagedKvStore store(*pool, SeqSlot(0));
  ASSERT_TRUE(store.AddBlocks(std::vector<BlockId>{BlockId(4), BlockId(1), BlockId(3)}).ok());
  // Rows the model would write: random values through the formats' fake
  // quantization (each row its own magnitude), a zero row and a NaN block.
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int64_t n = 10;
  std::vector<float> kv(n * 128), keys(n * 64);
  for (int64_t e = 0; e < n; ++e) {
    const float scale = std::ldexp(1.0f, static_cast<int>(e) * 3 - 12);
    for (int64_t k = 0; k < 128; ++k) kv[e * 128 + k] = e == 2 ? 0.0f : normal(rng) * scale;
    for (int64_t k = 0; k < 64; ++k) keys[e * 64 + k] = normal(rng) * scale;
  }
  kv[5 * 128 + 17] = NAN;
  for (int64_t e = 0; e < n; ++e) {
    ASSERT_TRUE(kernels::cpu::FakeQuantFp4(std::span<float>(kv).subspan(e * 128, 128), 16,
                                           kernels::cpu::Fp4Scale::kE4m3)
                    .ok());
    ASSERT_TRUE(kernels::cpu::FakeQuantFp4(std::span<float>(keys).subspan(e * 64, 64), 32,
                                           kernels::cpu::Fp4Scale::kE8m0)
                    .ok());
  }
  ASSERT_TRUE(store.Append(0, std::span<const float>(kv).first(3 * 128),
                           std::span<const float>(keys).first(3 * 64))
                  .ok());
  ASSERT_TRUE(store.Append(0, std::span<const float>(kv).subspan(3 * 128),
                           std::span<const float>(keys).subspan(3 * 64))
                  .ok());
  ASSERT_EQ(store.entries(0), n);
  for (int64_t first = 0; first < n; ++first) {
    const int64_t count = n - first;
    std::vector<float> a(count * 128), b(count * 64);
    store.ReadKv(0, first, a);
    store.ReadIndexK(0, first, b);
    for (int64_t i = 0; i < count * 128; ++i) {
      const float want = kv[first * 128 + i];
      if (std::isnan(want)) {
        ASSERT_TRUE(std::isnan(a[i])) << first << " " << i;
      } else {
        ASSERT_EQ(std::memcmp(&a[i], &want, 4), 0) << first << " " << i;
      }
    }
    ASSERT_EQ(std::memcmp(b.data(), keys.data() + first * 64, b.size() * 4), 0) << first;
  }
  // Not a value of FP4 x E4M3: refused, nothing written, entries unchanged.
  ASSERT_TRUE(store.AddBlocks(std::vector<BlockId>{BlockId(0)}).ok());
  const std::vector<float> before(pool->block(BlockId(0)).begin(),
                                  pool->block(BlockId(0)).end());
  std::vector<float> odd(128, 0.0f), odd_keys(64, 0.0f);
  odd[0] = 1.0f;
  odd[1] = 0.3f;  // the block's scale is 1/6: 0.3 * 6 = 1.8 is no e2m1 value
  const absl::Status st = store.Append(0, odd, odd_keys);
  EXPECT_EQ(st.code(), absl::StatusCode::kInternal) << st;
  EXPECT_EQ(store.entries(0), n);
  EXPECT_TRUE(std::equal(before.begin(), before.end(), pool->block(BlockId(0)).begin()));
}

}  // namespace
}  // namespace weir::worker::kv_cache
