#include "worker/model/sequence_state.h"

#include <fstream>
#include <sstream>

#include "gtest/gtest.h"

namespace weir::model {
namespace {

ModelConfig TinyConfig() {
  std::ifstream in("models/random/tiny/config.json");
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
  ASSERT_EQ(s.kv_source(src).ratio, 2);
  for (int64_t p = 0; p < 9; ++p) s.engram_history().push_back(p);
  const std::vector<float> kv(4 * c.head_dim, 1.0f), keys(4 * c.index_head_dim, 1.0f);
  ASSERT_TRUE(s.compressed().Append(src, kv, keys).ok());  // 9 positions -> 4 entries
  s.Advance(9);
  ASSERT_TRUE(s.Rollback(4).ok());  // 5 positions -> 2 entries
  EXPECT_EQ(s.length(), 5);
  EXPECT_EQ(s.compressed().entries(src), 2);
  EXPECT_EQ(s.engram_history().size(), 5u);
  EXPECT_EQ(s.Rollback(5).code(), absl::StatusCode::kInvalidArgument);  // > max_rollback
  EXPECT_EQ(s.Rollback(-1).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(s.Rollback(4).ok());
  EXPECT_EQ(s.Rollback(2).code(), absl::StatusCode::kInvalidArgument);  // > length
  EXPECT_EQ(s.length(), 1);
}

// A store that refuses every Append beyond `limit` entries per layer (a paged
// store with too few blocks).
class LimitedStore final : public CompressedKvStore {
 public:
  LimitedStore(const ModelConfig& c, const LayerRoles& roles, int64_t limit)
      : inner_(c, roles), limit_(limit) {}
  int64_t entries(int layer) const override { return inner_.entries(layer); }
  absl::Status Append(int layer, std::span<const float> kv,
                      std::span<const float> index_k) override {
    if (inner_.entries(layer) + static_cast<int64_t>(kv.size() / 128) > limit_) {
      return absl::ResourceExhaustedError("no room");
    }
    ++appends;
    return inner_.Append(layer, kv, index_k);
  }
  void Truncate(int layer, int64_t entries) override { inner_.Truncate(layer, entries); }
  void ReadKv(int layer, int64_t first, std::span<float> out) const override {
    inner_.ReadKv(layer, first, out);
  }
  void ReadIndexK(int layer, int64_t first, std::span<float> out) const override {
    inner_.ReadIndexK(layer, first, out);
  }
  int appends = 0;

 private:
  DenseKvStore inner_;
  int64_t limit_;
};

TEST(SequenceStateTest, CopiesAreDenseAndCopyFromKeepsTheStore) {
  const ModelConfig c = TinyConfig();
  ASSERT_EQ(c.head_dim, 128);
  const LayerRoles roles(c);
  auto limited = std::make_unique<LimitedStore>(c, roles, 3);
  LimitedStore* store = limited.get();
  SequenceState s(c, roles, 4, std::move(limited));
  const int src = c.kv_source_layers[0];
  std::vector<float> kv(2 * c.head_dim), keys(2 * c.index_head_dim);
  for (size_t i = 0; i < kv.size(); ++i) kv[i] = static_cast<float>(i);
  for (size_t i = 0; i < keys.size(); ++i) keys[i] = -static_cast<float>(i);
  ASSERT_TRUE(s.compressed().Append(src, kv, keys).ok());
  s.Advance(4);
  EXPECT_EQ(store->appends, 1);

  // A copy has its own dense store with the same entries.
  SequenceState copy(s);
  EXPECT_EQ(copy.length(), 4);
  std::vector<float> back(2 * c.head_dim), back_keys(2 * c.index_head_dim);
  copy.compressed().ReadKv(src, 0, back);
  copy.compressed().ReadIndexK(src, 0, back_keys);
  EXPECT_EQ(back, kv);
  EXPECT_EQ(back_keys, keys);
  ASSERT_TRUE(copy.compressed().Append(src, kv, keys).ok());  // dense: no limit
  copy.Advance(4);
  EXPECT_EQ(store->appends, 1);                                // the original is untouched
  EXPECT_EQ(s.compressed().entries(src), 2);

  // CopyFrom writes into the state's own store, which may refuse.
  SequenceState other(c, roles, 4);
  ASSERT_TRUE(other.CopyFrom(s).ok());
  EXPECT_EQ(other.compressed().entries(src), 2);
  const absl::Status refused = s.CopyFrom(copy);  // 4 entries into a store of 3
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(s.broken());
}

}  // namespace
}  // namespace weir::model
