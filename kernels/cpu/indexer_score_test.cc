// kernels/cpu/indexer_score_test.cc

#include "kernels/cpu/indexer_score.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/common/numeric_formats.h"

namespace weir::kernels::cpu {
namespace {

TEST(IndexerScore, ReluWeightedHeadSumWithCausalMask) {
  // 2 heads, dim 2, 3 keys. Head 0 q = (1, 0), head 1 q = (0, 1); w = (2, -1).
  std::vector<float> q = {1, 0, 0, 1}, w = {2.0f, -1.0f};
  std::vector<float> k = {3, -4,    // head0 3, head1 -4 (relu 0): 6
                          -1, 2,    // head0 relu 0, head1 2: -2
                          5, 5};    // invisible
  std::vector<int64_t> visible = {2};
  std::vector<float> out(3);
  ASSERT_TRUE(IndexerScore({.q = q, .k = k, .weights = w, .visible_len = visible, .out = out,
                            .queries = 1, .heads = 2, .dim = 2, .keys = 3}).ok());
  EXPECT_EQ(out[0], 6.0f);
  EXPECT_EQ(out[1], -2.0f);
  EXPECT_EQ(out[2], -std::numeric_limits<float>::infinity());
}

TEST(IndexerScore, RejectsBadArgs) {
  std::vector<float> q(4), k(6), w(2), out(3);
  std::vector<int64_t> visible = {4};
  EXPECT_FALSE(IndexerScore({.q = q, .k = k, .weights = w, .visible_len = visible, .out = out,
                             .queries = 1, .heads = 2, .dim = 2, .keys = 3}).ok());
  visible[0] = 3;
  EXPECT_FALSE(IndexerScore({.q = q, .k = k, .weights = w, .visible_len = visible, .out = out,
                             .queries = 1, .heads = 1, .dim = 2, .keys = 3}).ok());
}

TEST(IndexerScoreTest, Bf16ModeRoundsEachStage) {
  // One query, two heads of dim 1, two keys; the second key is invisible.
  // head 0: dot = 1.00390625 (bf16 -> 1.0), relu * w 0.5 -> 0.5
  // head 1: dot = -2 -> relu 0
  const std::vector<float> q = {1.00390625f, -2.0f};
  const std::vector<float> k = {1.0f, 3.0f};
  const std::vector<float> w = {0.5f, 0.25f};
  const std::vector<int64_t> visible = {1};
  std::vector<float> out(2);
  ASSERT_TRUE(IndexerScore({.q = q, .k = k, .weights = w, .visible_len = visible,
                                .out = out, .queries = 1, .heads = 2, .dim = 1, .keys = 2, .round_bf16 = true})
                  .ok());
  EXPECT_EQ(out[0], 0.5f);  // fp32 would give 0.501953125
  EXPECT_EQ(out[1], -std::numeric_limits<float>::infinity());
}

TEST(IndexerScoreTest, Bf16ModeRoundsTheHeadSumOnce) {
  // 3 heads each contributing 1 + 2^-7 (exact in bf16): the fp32 sum
  // 3.0234375 lies halfway between the bf16 neighbours 3.015625 and 3.03125
  // (ulp 2^-6) and rounds to the even one, 3.03125.
  const std::vector<float> q = {1.0078125f, 1.0078125f, 1.0078125f};
  const std::vector<float> k = {1.0f};
  const std::vector<float> w = {1.0f, 1.0f, 1.0f};
  const std::vector<int64_t> visible = {1};
  std::vector<float> out(1);
  ASSERT_TRUE(IndexerScore({.q = q, .k = k, .weights = w, .visible_len = visible,
                                .out = out, .queries = 1, .heads = 3, .dim = 1, .keys = 1, .round_bf16 = true})
                  .ok());
  EXPECT_EQ(out[0], 3.03125f);
}

// The scores' bits are defined by the header's order: for each key, the
// head terms in h order, each dot product in c order from +0 (no FMA). The
// kernel computes eight keys side by side; this plain loop is the order
// written out, and the two must agree bit for bit on random inputs (bf16
// rounding on and off, visible lengths that are not multiples of 8).
std::vector<float> PlainScores(const IndexerScoreArgs& a) {
  auto round = [&a](float x) { return a.round_bf16 ? RoundToBf16(x) : x; };
  std::vector<float> out(a.queries * a.keys, -std::numeric_limits<float>::infinity());
  for (int64_t s = 0; s < a.queries; ++s) {
    for (int64_t t = 0; t < a.visible_len[s]; ++t) {
      float total = 0.0f;
      for (int h = 0; h < a.heads; ++h) {
        volatile float dot = 0.0f;  // one rounding per product and per sum
        for (int c = 0; c < a.dim; ++c) {
          const float p = a.q[(s * a.heads + h) * a.dim + c] * a.k[t * a.dim + c];
          dot = dot + p;
        }
        total += round(std::max(round(dot), 0.0f) * a.weights[s * a.heads + h]);
      }
      out[s * a.keys + t] = round(total);
    }
  }
  return out;
}

TEST(IndexerScoreTest, TiledKeysKeepThePlainOrdersBits) {
  std::mt19937 rng(17);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (bool bf16 : {false, true}) {
    for (int64_t keys : {int64_t{1}, int64_t{7}, int64_t{8}, int64_t{61}, int64_t{200}}) {
      const int64_t queries = 5;
      const int heads = 3, dim = 37;
      std::vector<float> q(queries * heads * dim), k(keys * dim), w(queries * heads);
      for (float& v : q) v = normal(rng);
      for (float& v : k) v = normal(rng);
      for (float& v : w) v = normal(rng);
      std::vector<int64_t> visible(queries);
      for (int64_t s = 0; s < queries; ++s) {
        visible[s] = s == 0 ? 0 : s == 1 ? keys : static_cast<int64_t>(rng() % (keys + 1));
      }
      std::vector<float> out(queries * keys);
      const IndexerScoreArgs args{.q = q, .k = k, .weights = w, .visible_len = visible,
                                  .out = out, .queries = queries, .heads = heads, .dim = dim,
                                  .keys = keys, .round_bf16 = bf16};
      ASSERT_TRUE(IndexerScore(args).ok());
      const std::vector<float> want = PlainScores(args);
      EXPECT_EQ(std::memcmp(out.data(), want.data(), out.size() * sizeof(float)), 0)
          << "keys " << keys << " bf16 " << bf16;
    }
  }
}

}  // namespace
}  // namespace weir::kernels::cpu
