// kernels/cpu/compressor_test.cc

#include "kernels/cpu/compressor.h"

#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace weir::kernels::cpu {
namespace {

// Runs tokens [start, start + n) of `kv`/`score` through the compressor.
std::vector<float> Pool(const std::vector<float>& kv, const std::vector<float>& score, int64_t start,
                       int64_t n, int64_t d, int r, std::vector<float>& kv_state,
                       std::vector<float>& score_state) {
  std::vector<float> out(CompressedCount(start, n, r) * d);
  absl::Status s = CompressorPool(
      {.kv = std::span<const float>(kv).subspan(start * d, n * d),
       .score = std::span<const float>(score).subspan(start * d, n * d), .kv_state = kv_state,
       .score_state = score_state, .out = out, .start_pos = start, .tokens = n, .dim = d,
       .ratio = r});
  EXPECT_TRUE(s.ok()) << s;
  return out;
}

TEST(CompressorPool, SoftmaxPoolingPerChannel) {
  // r = 2, channel 0: scores (0, ln 3) -> weights (.25, .75) over kv (1, 3) = 2.5;
  // channel 1: equal scores -> mean of (10, 20) = 15.
  std::vector<float> kv = {1, 10, 3, 20}, score = {0, 5, std::log(3.0f), 5};
  std::vector<float> ks(4), ss(4);
  std::vector<float> out = Pool(kv, score, 0, 2, 2, 2, ks, ss);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_FLOAT_EQ(out[0], 2.5f);
  EXPECT_FLOAT_EQ(out[1], 15.0f);
}

TEST(CompressorPool, LargeScoresAreStableAndRatioOneIsIdentity) {
  std::vector<float> kv = {1, 7}, score = {0, 1000};
  std::vector<float> ks(2), ss(2);
  EXPECT_EQ(Pool(kv, score, 0, 2, 1, 2, ks, ss), (std::vector<float>{7.0f}));
  std::vector<float> k1(1), s1(1);
  EXPECT_EQ(Pool(kv, score, 0, 2, 1, 1, k1, s1), (std::vector<float>{1.0f, 7.0f}));
}

TEST(CompressorPool, ChunkingAndPartialGroupsMatchOneTokenAtATime) {
  const int64_t d = 4, n = 11;
  const int r = 3;
  std::mt19937 rng(21);
  std::normal_distribution<float> normal;
  std::vector<float> kv(n * d), score(n * d);
  for (float& v : kv) v = normal(rng);
  for (float& v : score) v = 2 * normal(rng);
  std::vector<float> ks(r * d), ss(r * d);
  const std::vector<float> whole = Pool(kv, score, 0, n, d, r, ks, ss);
  ASSERT_EQ(whole.size(), size_t(3 * d));  // 11 / 3 groups; tokens 9, 10 wait in the state
  std::vector<float> one_by_one;
  std::vector<float> ks1(r * d), ss1(r * d);
  for (int64_t p = 0; p < n; ++p) {
    std::vector<float> out = Pool(kv, score, p, 1, d, r, ks1, ss1);
    EXPECT_EQ(out.size(), (p + 1) % r == 0 ? size_t(d) : 0u) << p;
    one_by_one.insert(one_by_one.end(), out.begin(), out.end());
  }
  EXPECT_EQ(whole, one_by_one);  // bit-identical
  std::vector<float> chunked, ks2(r * d), ss2(r * d);
  for (auto [start, len] : {std::pair<int64_t, int64_t>{0, 2}, {2, 5}, {7, 4}}) {
    std::vector<float> out = Pool(kv, score, start, len, d, r, ks2, ss2);
    chunked.insert(chunked.end(), out.begin(), out.end());
  }
  EXPECT_EQ(whole, chunked);
  EXPECT_EQ(ks, ks2);  // the partial group (tokens 9, 10) is carried identically
}

TEST(CompressorPool, RejectsBadArgs) {
  std::vector<float> kv(4), score(4), ks(4), ss(4), out(2);
  EXPECT_FALSE(CompressorPool({.kv = kv, .score = score, .kv_state = ks, .score_state = ss,
                               .out = out, .tokens = 2, .dim = 2, .ratio = 0}).ok());
  EXPECT_FALSE(CompressorPool({.kv = kv, .score = score, .kv_state = ks, .score_state = ss,
                               .out = out, .tokens = 2, .dim = 2, .ratio = 3}).ok());  // state
  std::vector<float> none;
  EXPECT_FALSE(CompressorPool({.kv = kv, .score = score, .kv_state = ks, .score_state = ss,
                               .out = none, .tokens = 2, .dim = 2, .ratio = 2}).ok());  // out
  EXPECT_EQ(CompressedCount(3, 4, 2), 2);  // positions 3..6 complete groups 1 and 2
}

}  // namespace
}  // namespace weir::kernels::cpu
