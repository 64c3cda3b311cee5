// kernels/cpu/topk_test.cc

#include "kernels/cpu/topk.h"

#include <limits>
#include <vector>

#include "gtest/gtest.h"

namespace weir::kernels::cpu {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

std::vector<int32_t> Topk(const std::vector<float>& row, int64_t visible, int k, int32_t offset) {
  std::vector<int64_t> vis = {visible};
  std::vector<int32_t> out(k);
  absl::Status s = TopkPositions({.scores = row, .visible_len = vis, .out = out, .rows = 1,
                                  .width = static_cast<int64_t>(row.size()), .k = k,
                                  .offset = offset});
  EXPECT_TRUE(s.ok()) << s;
  return out;
}

TEST(TopkPositions, BestKResortedByPositionWithOffset) {
  EXPECT_EQ(Topk({0.1f, 0.9f, 0.5f, 0.7f, kNegInf}, 4, 2, 10), (std::vector<int32_t>{11, 13}));
  EXPECT_EQ(Topk({5, 5, 5}, 3, 2, 0), (std::vector<int32_t>{0, 1}));  // ties: lower position
}

TEST(TopkPositions, EmptySlotsAreMinusOneAtTheEnd) {
  EXPECT_EQ(Topk({1.0f, kNegInf, kNegInf}, 3, 3, 7), (std::vector<int32_t>{7, -1, -1}));
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(Topk({nan, 2.0f}, 2, 2, 0), (std::vector<int32_t>{1, -1}));
  // As in the reference, invisible positions compete in the top-k and are then
  // dropped: positions 2 and 3 win but lie beyond compress_len 2.
  EXPECT_EQ(Topk({1, 2, 9, 9, kNegInf}, 2, 3, 0), (std::vector<int32_t>{1, -1, -1}));
  EXPECT_EQ(Topk({1, 2}, 2, 4, 0), (std::vector<int32_t>{0, 1, -1, -1}));  // k > width
}

TEST(TopkPositions, RejectsBadArgs) {
  std::vector<float> scores(4);
  std::vector<int64_t> vis = {5};
  std::vector<int32_t> out(2);
  EXPECT_EQ(TopkPositions({.scores = scores, .visible_len = vis, .out = out, .rows = 1,
                           .width = 4, .k = 2}).code(),
            absl::StatusCode::kInvalidArgument);
  vis[0] = 4;
  EXPECT_EQ(TopkPositions({.scores = scores, .visible_len = vis, .out = out, .rows = 1,
                           .width = 4, .k = 3}).code(),
            absl::StatusCode::kInvalidArgument);
}

std::vector<uint8_t> Pool(const std::vector<float>& row, int64_t visible, int topk_blocks, int b) {
  std::vector<int64_t> vis = {visible};
  std::vector<uint8_t> pool(row.size(), 9);
  absl::Status s = CandidateBlocks({.scores = row, .visible_len = vis, .pool = pool, .rows = 1,
                                    .width = static_cast<int64_t>(row.size()),
                                    .topk_blocks = topk_blocks, .block_size = b});
  EXPECT_TRUE(s.ok()) << s;
  return pool;
}

TEST(CandidateBlocks, BlockMaxTopBlocksAndPinnedNewestBlock) {
  // 20 positions, blocks of 8: [0,8) max 5, [8,16) max 9, [16,20) max 1 (newest, pinned).
  std::vector<float> row(20, 0.0f);
  row[3] = 5.0f;
  row[10] = 9.0f;
  row[17] = 1.0f;
  std::vector<uint8_t> pool = Pool(row, 20, 2, 8);
  for (int t = 0; t < 20; ++t) EXPECT_EQ(pool[t], t >= 8 ? 1 : 0) << t;
  // Without the pin the top-2 blocks would be 1 and 0.
  row[17] = -100.0f;
  pool = Pool(row, 20, 2, 8);
  EXPECT_EQ(pool[0], 0);
  EXPECT_EQ(pool[19], 1);
}

TEST(CandidateBlocks, UnreachableBlocksAreDropped) {
  // compress_len 9: position 8 is the newest, block 1 pinned; block 2 is all -inf.
  std::vector<float> row(20, kNegInf);
  for (int t = 0; t < 9; ++t) row[t] = float(t);
  std::vector<uint8_t> pool = Pool(row, 9, 3, 8);
  for (int t = 0; t < 20; ++t) EXPECT_EQ(pool[t], t < 16 ? 1 : 0) << t;
  std::vector<float> none(8, kNegInf);
  pool = Pool(none, 0, 4, 8);
  for (uint8_t v : pool) EXPECT_EQ(v, 0);
}

}  // namespace
}  // namespace weir::kernels::cpu
