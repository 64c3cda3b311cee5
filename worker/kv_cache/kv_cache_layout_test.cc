#include "worker/kv_cache/kv_cache_layout.h"

#include <fstream>
#include <sstream>

#include "gtest/gtest.h"

namespace weir::worker::kv_cache {
namespace {

model::ModelConfig TinyConfig() {
  std::ifstream in("models/tiny/config.json");
  std::ostringstream s;
  s << in.rdbuf();
  absl::StatusOr<model::ModelConfig> c = model::ParseModelConfig(s.str());
  EXPECT_TRUE(c.ok()) << c.status();
  return *c;
}

TEST(KvCacheLayoutTest, OneRegionPerKvSourceLayer) {
  const model::ModelConfig c = TinyConfig();
  const model::LayerRoles roles(c);
  absl::StatusOr<KvCacheLayout> layout = MakeKvCacheLayout(c, roles, 64);
  ASSERT_TRUE(layout.ok()) << layout.status();
  // tiny: kv sources 2 (ratio 2), 4 (ratio 2), 6 (ratio 1); head 128, index 64.
  ASSERT_EQ(layout->layers.size(), 3u);
  EXPECT_EQ(layout->compress_ratios(), (std::vector<int32_t>{2, 2, 1}));
  int64_t offset = 0;
  for (const KvLayerLayout& l : layout->layers) {
    EXPECT_EQ(l.entries_per_block, 64 / l.ratio);
    EXPECT_EQ(l.kv_offset, offset);
    EXPECT_EQ(l.index_offset, offset + l.entries_per_block * c.head_dim);
    offset = l.index_offset + l.entries_per_block * c.index_head_dim;
    EXPECT_EQ(layout->Find(l.layer), &l);
  }
  EXPECT_EQ(layout->block_floats, offset);
  EXPECT_EQ(layout->block_floats, (32 + 32 + 64) * (128 + 64));
  EXPECT_EQ(layout->block_bytes(), layout->block_floats * 4);
  EXPECT_EQ(layout->Find(3), nullptr);
  EXPECT_EQ(layout->Find(-1), nullptr);
  EXPECT_EQ(layout->Find(1000), nullptr);
}

TEST(KvCacheLayoutTest, RatiosMustDivideTheBlock) {
  const model::ModelConfig c = TinyConfig();
  const model::LayerRoles roles(c);
  EXPECT_EQ(MakeKvCacheLayout(c, roles, 3).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(MakeKvCacheLayout(c, roles, 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(MakeKvCacheLayout(c, roles, 2).ok());
}

TEST(KvCacheLayoutTest, BlocksForPositionsFollowsTheCoordinatorsRule) {
  const model::ModelConfig c = TinyConfig();
  const model::LayerRoles roles(c);
  const KvCacheLayout layout = *MakeKvCacheLayout(c, roles, 16);
  EXPECT_EQ(BlocksForPositions(layout, 0), 0);
  EXPECT_EQ(BlocksForPositions(layout, -3), 0);
  EXPECT_EQ(BlocksForPositions(layout, 1), 1);   // ratio 1: one entry
  EXPECT_EQ(BlocksForPositions(layout, 16), 1);
  EXPECT_EQ(BlocksForPositions(layout, 17), 2);
  EXPECT_EQ(BlocksForPositions(layout, 160), 10);
  EXPECT_EQ(BlocksForPositions(KvCacheLayout{.block_tokens = 16}, 1000), 0);
}

TEST(KvCacheLayoutTest, SlotBytesCountRingsAndPartialGroups) {
  const model::ModelConfig c = TinyConfig();
  const model::LayerRoles roles(c);
  // 15 rings of (window 8 + rollback 6) x 128, two ratio-2 partial groups of (2 + 6) x 256.
  const int64_t want = (15 * 14 * 128 + 2 * 8 * 256) * 4;
  EXPECT_EQ(SequenceSlotBytes(c, roles, 6), want);
}

TEST(KvCacheLayoutTest, SizingFromABudget) {
  const model::ModelConfig c = TinyConfig();
  const model::LayerRoles roles(c);
  const KvCacheLayout layout = *MakeKvCacheLayout(c, roles, 64);
  const int64_t block = layout.block_bytes();
  absl::StatusOr<KvCacheSize> size = SizeKvCache(layout, 1000, 4 * 1000 + 10 * block + 7, 4);
  ASSERT_TRUE(size.ok()) << size.status();
  EXPECT_EQ(size->num_blocks, 10);
  EXPECT_EQ(size->num_slots, 4);
  EXPECT_EQ(size->used_bytes, 4 * 1000 + 10 * block);
  // Exactly the slots and one block.
  EXPECT_EQ(SizeKvCache(layout, 1000, 4 * 1000 + block, 4)->num_blocks, 1);
  absl::Status small = SizeKvCache(layout, 1000, 4 * 1000 + block - 1, 4).status();
  EXPECT_EQ(small.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(small.message().find("--kv_cache_bytes"), std::string::npos) << small;
  // A fixed count wins over the budget.
  EXPECT_EQ(SizeKvCache(layout, 1000, 0, 4, /*fixed_blocks=*/8)->num_blocks, 8);
  EXPECT_EQ(SizeKvCache(layout, 1000, 1 << 20, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SizeKvCache(layout, -1, 1 << 20, 4).status().code(),
            absl::StatusCode::kInvalidArgument);
  // Never more blocks than a block id can name.
  EXPECT_EQ(SizeKvCache(layout, 0, int64_t{1} << 62, 1)->num_blocks, (int64_t{1} << 31) - 1);
  // A model without compressed KV needs no blocks.
  EXPECT_EQ(SizeKvCache(KvCacheLayout{.block_tokens = 64}, 1000, 4000, 4)->num_blocks, 0);
}

}  // namespace
}  // namespace weir::worker::kv_cache
