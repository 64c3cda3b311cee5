#include "worker/kv_cache/kv_cache_layout.h"

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "gtest/gtest.h"

namespace weir::worker::kv_cache {
namespace {

model::ModelConfig Config(const std::string& name) {
  std::ifstream in("models/" + name + "/config.json");
  std::ostringstream s;
  s << in.rdbuf();
  absl::StatusOr<model::ModelConfig> c = model::ParseModelConfig(s.str());
  EXPECT_TRUE(c.ok()) << c.status();
  return *c;
}

model::ModelConfig TinyConfig() { return Config("random/tiny"); }

TEST(KvCacheLayoutTest, OneRegionPerKvSourceLayer) {
  const model::ModelConfig c = TinyConfig();
  const model::LayerRoles roles(c);
  absl::StatusOr<KvCacheLayout> layout = MakeKvCacheLayout(c, roles, 64);
  ASSERT_TRUE(layout.ok()) << layout.status();
  // tiny: kv sources 2 (ratio 2), 4 (ratio 2), 6 (ratio 1); head 128, index 64.
  ASSERT_EQ(layout->layers.size(), 3u);
  EXPECT_EQ(layout->compress_ratios(), (std::vector<int32_t>{2, 2, 1}));
  // Packed: an entry is its stored form, KV 64 code bytes + 8 E4M3 scales,
  // index keys 32 code bytes + 2 E8M0 scales.
  EXPECT_TRUE(layout->packed);
  int64_t offset = 0;
  for (const KvLayerLayout& l : layout->layers) {
    EXPECT_EQ(l.entries_per_block, 64 / l.ratio);
    EXPECT_EQ(l.kv_entry_bytes, 72);
    EXPECT_EQ(l.index_entry_bytes, 34);
    EXPECT_EQ(l.kv_offset, offset);
    EXPECT_EQ(l.index_offset, offset + l.entries_per_block * 72);
    offset = l.index_offset + l.entries_per_block * 34;
    EXPECT_EQ(layout->Find(l.layer), &l);
  }
  EXPECT_EQ(offset, (32 + 32 + 64) * (72 + 34));
  EXPECT_EQ(layout->block_floats, (offset + 3) / 4);
  EXPECT_EQ(layout->block_bytes(), layout->block_floats * 4);
  // Unpacked: fp32 values, 4 bytes an element (7.2x the stored form here).
  absl::StatusOr<KvCacheLayout> fp32 = MakeKvCacheLayout(c, roles, 64, /*packed=*/false);
  ASSERT_TRUE(fp32.ok());
  EXPECT_FALSE(fp32->packed);
  EXPECT_EQ(fp32->block_floats, (32 + 32 + 64) * (128 + 64));
  EXPECT_EQ(fp32->layers[2].index_offset, 64 * 128 * 4 + fp32->layers[2].kv_offset);
  EXPECT_EQ(layout->Find(3), nullptr);
  EXPECT_EQ(layout->Find(-1), nullptr);
  EXPECT_EQ(layout->Find(1000), nullptr);
}

// KV bytes per token in the paged pool equal the model's stored bytes: for
// V4.1-Flash, per compressed entry 256 + 32 bytes of KV (FP4 + E4M3 per 16)
// and 64 + 4 of index key (MXFP4), at ratios 2, 2, 2 and 1 (layers 2, 8, 14,
// 20): 3 x 356 / 2 + 356 = 890 bytes a token, against 6,400 in fp32. Whole
// blocks add no padding here (the ratios divide the block).
TEST(KvCacheLayoutTest, V41PackedBytesPerTokenAreTheStoredForm) {
  const model::ModelConfig c = Config("v41-flash");
  const model::LayerRoles roles(c);
  absl::StatusOr<KvCacheLayout> layout = MakeKvCacheLayout(c, roles, 64);
  ASSERT_TRUE(layout.ok()) << layout.status();
  ASSERT_TRUE(layout->packed);
  double theoretical = 0;
  for (const KvLayerLayout& l : layout->layers) {
    theoretical += (256.0 + 32.0 + 64.0 + 4.0) / l.ratio;
  }
  EXPECT_EQ(theoretical, 890.0);
  EXPECT_EQ(static_cast<double>(layout->block_bytes()) / layout->block_tokens, theoretical);
  absl::StatusOr<KvCacheLayout> fp32 = MakeKvCacheLayout(c, roles, 64, false);
  ASSERT_TRUE(fp32.ok());
  EXPECT_EQ(fp32->block_bytes() / fp32->block_tokens, (512 + 128) * 4 * 3 / 2 + (512 + 128) * 4);
  std::printf("V4.1-Flash paged KV: %.1f bytes a token packed, %.1f fp32 (%.2fx)\n",
              static_cast<double>(layout->block_bytes()) / layout->block_tokens,
              static_cast<double>(fp32->block_bytes()) / fp32->block_tokens,
              static_cast<double>(fp32->block_bytes()) / layout->block_bytes());
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
