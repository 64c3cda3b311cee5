#include "worker/model/sequence_state.h"

#include <fstream>
#include <sstream>

#include "gtest/gtest.h"

namespace weir::model {
namespace {

ModelConfig TinyConfig() {
  std::ifstream in("models/tiny/config.json");
  std::ostringstream s;
  s << in.rdbuf();
  absl::StatusOr<ModelConfig> c = ParseModelConfig(s.str());
  EXPECT_TRUE(c.ok()) << c.status();
  return *c;
}

TEST(PositionRingTest, KeepsTheLatestCapacityPositions) {
  PositionRing ring(3, 2);
  for (int64_t p = 0; p < 7; ++p) {
    ring.Row(p)[0] = static_cast<float>(p);
    ring.Row(p)[1] = static_cast<float>(-p);
  }
  for (int64_t p = 4; p < 7; ++p) {
    EXPECT_EQ(ring.Row(p)[0], p);
    EXPECT_EQ(ring.Row(p)[1], -p);
  }
  EXPECT_EQ(ring.Row(3)[0], 6);  // overwritten by position 6
}

TEST(SequenceStateTest, ShapesFollowTheRoles) {
  const ModelConfig c = TinyConfig();
  const LayerRoles roles(c);
  SequenceState s(c, roles, 6);
  EXPECT_EQ(s.num_layers(), c.num_total_layers());
  EXPECT_EQ(s.window(0).capacity(), c.window_size + 6);
  EXPECT_EQ(s.window(0).width(), c.head_dim);
  for (const LayerRole& role : roles.layers()) {
    if (!role.has_compressor) continue;
    EXPECT_EQ(s.kv_source(role.layer).ratio, role.ratio);
    EXPECT_EQ(s.kv_source(role.layer).pending.capacity(), role.ratio > 1 ? role.ratio + 6 : 0);
  }
}

TEST(SequenceStateTest, RollbackTruncatesCompressedEntriesAndHistory) {
  const ModelConfig c = TinyConfig();
  const LayerRoles roles(c);
  SequenceState s(c, roles, 4);
  const int src = c.kv_source_layers[0];  // ratio 2 in tiny
  KvSourceState& kv = s.kv_source(src);
  ASSERT_EQ(kv.ratio, 2);
  for (int64_t p = 0; p < 9; ++p) s.engram_history().push_back(p);
  kv.compressed_kv.assign(4 * c.head_dim, 1.0f);  // 9 positions -> 4 entries
  kv.index_k.assign(4 * c.index_head_dim, 1.0f);
  s.Advance(9);
  ASSERT_TRUE(s.Rollback(4).ok());  // 5 positions -> 2 entries
  EXPECT_EQ(s.length(), 5);
  EXPECT_EQ(kv.compressed_kv.size(), 2u * c.head_dim);
  EXPECT_EQ(kv.index_k.size(), 2u * c.index_head_dim);
  EXPECT_EQ(s.engram_history().size(), 5u);
  EXPECT_EQ(s.Rollback(5).code(), absl::StatusCode::kInvalidArgument);  // > max_rollback
  EXPECT_EQ(s.Rollback(-1).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(s.Rollback(4).ok());
  EXPECT_EQ(s.Rollback(2).code(), absl::StatusCode::kInvalidArgument);  // > length
  EXPECT_EQ(s.length(), 1);
}

}  // namespace
}  // namespace weir::model
