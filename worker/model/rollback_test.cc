// Rollback of rejected drafts (speculative decoding, spec §4.8) in every
// per-sequence state the CPU model keeps, on a generated `tiny` checkpoint
// (window 8, ratio-2 and ratio-1 kv sources, Engram, 3 DSpark stages,
// block 5): after verifying N drafts in one forward of [t, d1..dN] of which
// k are accepted (Rollback(N - k)), each state equals, bit for bit, that of
// a sequence that decoded t, d1..dk one token at a time.
#include <algorithm>
#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "worker/model/model.h"
#include "worker/model/tiny_checkpoint.h"
#include "worker/model/tiny_model_test_util.h"

namespace weir::model {
namespace {

// The random-weight tiny (models/random/tiny), whatever models/tiny holds.
const Checkpoint& Tiny() {
  return *DerivedCheckpoint("random/tiny", "random_tiny_seed13", {}, 13);
}

bool SameBits(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// The two sequences of one case: `verified` forwarded the prefix, then
// [t, d1..dN] in one forward and rolled back N - k; `stepped` forwarded the
// prefix, then t, d1..dk one at a time.
struct Case {
  std::unique_ptr<Model> model;
  std::unique_ptr<SequenceState> verified, stepped;
};

Case VerifyAndStep(int prefix_len, int n, int k) {
  Case c;
  c.model = NewModelOrFail(Tiny());
  if (c.model == nullptr) return c;
  Model& m = *c.model;
  const std::vector<int64_t> prefix = RandomTokens(prefix_len, 21 + prefix_len);
  const std::vector<int64_t> block = RandomTokens(n + 1, 77 + n);  // t, d1..dN
  c.verified = m.NewSequence();
  c.stepped = m.NewSequence();
  EXPECT_TRUE(m.Forward(*c.verified, prefix, 0).ok());
  EXPECT_TRUE(m.Forward(*c.stepped, prefix, 0).ok());
  EXPECT_TRUE(m.Forward(*c.verified, block, prefix_len).ok());
  EXPECT_TRUE(c.verified->Rollback(n - k).ok());
  for (int j = 0; j <= k; ++j) {
    EXPECT_TRUE(m.Forward(*c.stepped, std::span(block).subspan(j, 1), prefix_len + j).ok());
  }
  return c;
}

// (prefix, N, k) cases: k = 0 (all rejected), partial, all accepted; prefixes
// that put the block across compression groups, the window and ring wraps.
struct Shape {
  int prefix, n, k;
};
const Shape kShapes[] = {{9, 4, 0}, {9, 4, 2}, {10, 4, 3}, {14, 5, 5}, {17, 3, 1}, {23, 5, 2}};

class RollbackTest : public ::testing::TestWithParam<Shape> {};

TEST_P(RollbackTest, SlidingWindowRingsOfEveryLayerAndDsparkStage) {
  const Shape s = GetParam();
  Case c = VerifyAndStep(s.prefix, s.n, s.k);
  ASSERT_NE(c.model, nullptr);
  const ModelConfig& cfg = c.model->config();
  const int64_t len = c.stepped->length();
  ASSERT_EQ(c.verified->length(), len);
  // Backbone layers and the DSpark stages (layers n_layers..): the rows of
  // the window a next forward reads.
  for (int layer = 0; layer < c.stepped->num_layers(); ++layer) {
    for (int64_t pos = std::max<int64_t>(0, len - cfg.window_size); pos < len; ++pos) {
      EXPECT_TRUE(SameBits(c.verified->window(layer).Row(pos), c.stepped->window(layer).Row(pos)))
          << "layer " << layer << " position " << pos;
    }
  }
}

TEST_P(RollbackTest, CompressedEntriesIndexKeysAndPartialGroups) {
  const Shape s = GetParam();
  Case c = VerifyAndStep(s.prefix, s.n, s.k);
  ASSERT_NE(c.model, nullptr);
  const int64_t len = c.stepped->length();
  int sources = 0;
  for (const LayerRole& role : c.model->roles().layers()) {
    if (!role.has_compressor) continue;
    ++sources;
    const int layer = role.layer;
    const KvSourceState& a = c.verified->kv_source(layer);
    const KvSourceState& b = c.stepped->kv_source(layer);
    const int64_t entries = c.stepped->compressed().entries(layer);
    ASSERT_EQ(entries, len / a.ratio) << "layer " << layer;
    ASSERT_EQ(c.verified->compressed().entries(layer), entries) << "layer " << layer;
    std::vector<float> kv_a(entries * a.kv_dim), kv_b(entries * a.kv_dim);
    std::vector<float> ik_a(entries * a.index_dim), ik_b(entries * a.index_dim);
    c.verified->compressed().ReadKv(layer, 0, kv_a);
    c.stepped->compressed().ReadKv(layer, 0, kv_b);
    c.verified->compressed().ReadIndexK(layer, 0, ik_a);
    c.stepped->compressed().ReadIndexK(layer, 0, ik_b);
    EXPECT_TRUE(SameBits(kv_a, kv_b)) << "compressed KV of layer " << layer;
    EXPECT_TRUE(SameBits(ik_a, ik_b)) << "index keys of layer " << layer;
    // The compressor inputs of the partly written group (ratio > 1).
    if (a.ratio > 1) {
      for (int64_t pos = len - len % a.ratio; pos < len; ++pos) {
        EXPECT_TRUE(SameBits(a.pending.Row(pos), b.pending.Row(pos)))
            << "compressor state of layer " << layer << " position " << pos;
      }
    }
  }
  EXPECT_GT(sources, 0);
}

TEST_P(RollbackTest, EngramHistoryAndTheNextForwardAndDraft) {
  const Shape s = GetParam();
  Case c = VerifyAndStep(s.prefix, s.n, s.k);
  ASSERT_NE(c.model, nullptr);
  EXPECT_EQ(c.verified->engram_history(), c.stepped->engram_history());
  // Everything a later step reads: the next forward and the next draft.
  const int64_t next[] = {41};
  const int64_t at = c.stepped->length();
  auto da = c.model->Draft(*c.verified, 9);
  auto db = c.model->Draft(*c.stepped, 9);
  ASSERT_TRUE(da.ok() && db.ok());
  EXPECT_TRUE(SameBits(da->logits, db->logits));
  EXPECT_EQ(da->tokens, db->tokens);
  auto la = c.model->Forward(*c.verified, next, at);
  auto lb = c.model->Forward(*c.stepped, next, at);
  ASSERT_TRUE(la.ok() && lb.ok());
  EXPECT_TRUE(SameBits(*la, *lb));
}

INSTANTIATE_TEST_SUITE_P(Blocks, RollbackTest, ::testing::ValuesIn(kShapes),
                         [](const ::testing::TestParamInfo<Shape>& info) {
                           return "prefix" + std::to_string(info.param.prefix) + "_n" +
                                  std::to_string(info.param.n) + "_k" +
                                  std::to_string(info.param.k);
                         });

}  // namespace
}  // namespace weir::model
