// kernels/cpu/indexer_score_test.cc

#include "kernels/cpu/indexer_score.h"

#include <limits>
#include <vector>

#include "gtest/gtest.h"

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

}  // namespace
}  // namespace weir::kernels::cpu
