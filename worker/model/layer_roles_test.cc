#include "worker/model/layer_roles.h"

#include <set>

#include "gtest/gtest.h"

namespace weir::model {
namespace {

ModelConfig Load(const char* name) {
  absl::StatusOr<ModelConfig> c = LoadModelConfig(std::string("models/") + name + "/config.json");
  EXPECT_TRUE(c.ok()) << c.status();
  return *c;
}

// The role table of spec §4.2, written out for V4.1-Flash.
TEST(LayerRolesTest, V41FlashMatchesSpecTable) {
  const ModelConfig c = Load("v41-flash");
  const LayerRoles roles(c);
  ASSERT_EQ(roles.size(), 43);
  const std::set<int> full = {2, 8, 14, 20};
  const std::set<int> reindex = {24, 28, 32, 36};
  for (int l = 0; l < 43; ++l) {
    const LayerRole& r = roles[l];
    SCOPED_TRACE(l);
    EXPECT_EQ(r.layer, l);
    if (l <= 1 || l >= 40) {
      EXPECT_EQ(r.attention, AttentionRole::kSwaOnly);
      EXPECT_EQ(r.kv_source, -1);
      EXPECT_EQ(r.index_source, -1);
      EXPECT_FALSE(r.has_compressor);
      EXPECT_FALSE(r.has_indexer);
      EXPECT_EQ(r.is_dspark_stage, l >= 40);
      continue;
    }
    if (l < 20) {
      EXPECT_EQ(r.ratio, 2);
      const int src = l < 8 ? 2 : l < 14 ? 8 : 14;
      EXPECT_EQ(r.kv_source, src);
      EXPECT_EQ(r.index_source, src);
      EXPECT_EQ(r.attention, full.count(l) ? AttentionRole::kFull : AttentionRole::kReuse);
      EXPECT_FALSE(r.is_decoder);
      EXPECT_EQ(r.candidate_source, -1);
    } else {
      EXPECT_EQ(r.ratio, 1);
      EXPECT_TRUE(r.is_decoder);
      EXPECT_EQ(r.kv_source, 20);
      const int idx = l < 24 ? 20 : 24 + 4 * ((l - 24) / 4);
      EXPECT_EQ(r.index_source, idx);
      const AttentionRole want = l == 20            ? AttentionRole::kFull
                                 : reindex.count(l) ? AttentionRole::kReindex
                                                    : AttentionRole::kReuse;
      EXPECT_EQ(r.attention, want);
      EXPECT_EQ(r.candidate_source, reindex.count(l) ? 20 : -1);
    }
    EXPECT_EQ(r.produces_candidates, l == 20);
    EXPECT_EQ(r.has_compressor, full.count(l) == 1);
    EXPECT_EQ(r.has_indexer, full.count(l) + reindex.count(l) == 1);
  }
  for (int l = 0; l < 43; ++l) {
    EXPECT_EQ(roles[l].has_engram, l == 1 || l == 14) << l;
    EXPECT_EQ(roles[l].is_dspark_target, l >= 37 && l <= 39) << l;
  }
}

// The tiny CI model keeps every role of V4.1 (spec §4.2) at 12 layers.
TEST(LayerRolesTest, TinyHasEveryRole) {
  const ModelConfig c = Load("random/tiny");
  const LayerRoles roles(c);
  ASSERT_EQ(roles.size(), 15);
  const std::string table = roles.DebugString();
  const char* expected =
      "0 r=0 swa\n"
      "1 r=0 swa engram\n"
      "2 r=2 full kv=2 idx=2\n"
      "3 r=2 reuse kv=2 idx=2\n"
      "4 r=2 full kv=4 idx=4 engram\n"
      "5 r=2 reuse kv=4 idx=4\n"
      "6 r=1 full kv=6 idx=6 pool-producer decoder\n"
      "7 r=1 reuse kv=6 idx=6 decoder\n"
      "8 r=1 reindex kv=6 idx=8 pool=6 decoder\n"
      "9 r=1 reuse kv=6 idx=8 decoder dspark-target\n"
      "10 r=1 reindex kv=6 idx=10 pool=6 decoder dspark-target\n"
      "11 r=1 reuse kv=6 idx=10 decoder dspark-target\n"
      "12 r=0 swa dspark-stage\n"
      "13 r=0 swa dspark-stage\n"
      "14 r=0 swa dspark-stage\n";
  EXPECT_EQ(table, expected);
  EXPECT_LE(c.window_size, 16);
}

// Without a candidate source a non-kv index source is still a Reindex layer,
// but scores the whole compressed KV.
TEST(LayerRolesTest, ReindexWithoutPool) {
  ModelConfig c = Load("random/tiny");
  c.candidate_source_layer = -1;
  ASSERT_TRUE(ValidateModelConfig(c).ok());
  const LayerRoles roles(c);
  EXPECT_EQ(roles[8].attention, AttentionRole::kReindex);
  EXPECT_EQ(roles[8].candidate_source, -1);
  EXPECT_FALSE(roles[6].produces_candidates);
}

}  // namespace
}  // namespace weir::model
