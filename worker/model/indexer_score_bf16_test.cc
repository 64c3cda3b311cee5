#include "worker/model/indexer_score_bf16.h"

#include <cmath>
#include <limits>
#include <vector>

#include "gtest/gtest.h"

namespace weir::model {
namespace {

TEST(IndexerScoreBf16Test, RoundsEachStageToBf16) {
  // One query, two heads of dim 1, two keys; the second key is invisible.
  // head 0: dot = 1.00390625 (bf16 -> 1.0), relu * w 0.5 -> 0.5
  // head 1: dot = -2 -> relu 0
  const std::vector<float> q = {1.00390625f, -2.0f};
  const std::vector<float> k = {1.0f, 3.0f};
  const std::vector<float> w = {0.5f, 0.25f};
  const std::vector<int64_t> visible = {1};
  std::vector<float> out(2);
  ASSERT_TRUE(IndexerScoreBf16({.q = q, .k = k, .weights = w, .visible_len = visible,
                                .out = out, .queries = 1, .heads = 2, .dim = 1, .keys = 2})
                  .ok());
  EXPECT_EQ(out[0], 0.5f);  // fp32 would give 0.501953125
  EXPECT_EQ(out[1], -std::numeric_limits<float>::infinity());
}

TEST(IndexerScoreBf16Test, HeadSumIsRoundedOnce) {
  // 3 heads each contributing 1 + 2^-7 (exact in bf16): the fp32 sum
  // 3.0234375 lies halfway between the bf16 neighbours 3.015625 and 3.03125
  // (ulp 2^-6) and rounds to the even one, 3.03125.
  const std::vector<float> q = {1.0078125f, 1.0078125f, 1.0078125f};
  const std::vector<float> k = {1.0f};
  const std::vector<float> w = {1.0f, 1.0f, 1.0f};
  const std::vector<int64_t> visible = {1};
  std::vector<float> out(1);
  ASSERT_TRUE(IndexerScoreBf16({.q = q, .k = k, .weights = w, .visible_len = visible,
                                .out = out, .queries = 1, .heads = 3, .dim = 1, .keys = 1})
                  .ok());
  EXPECT_EQ(out[0], 3.03125f);
}

TEST(IndexerScoreBf16Test, BadShapesAreInvalidArgument) {
  const std::vector<float> q(2), k(2), w(1);
  const std::vector<int64_t> visible = {3};
  std::vector<float> out(2);
  EXPECT_EQ(IndexerScoreBf16({.q = q, .k = k, .weights = w, .visible_len = visible, .out = out,
                              .queries = 1, .heads = 1, .dim = 2, .keys = 1})
                .code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace weir::model
