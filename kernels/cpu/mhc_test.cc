// kernels/cpu/mhc_test.cc

#include "kernels/cpu/mhc.h"

#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace weir::kernels::cpu {
namespace {

TEST(HcSplitSinkhorn, ZeroMixesGiveHalfPreUnitPostUniformComb) {
  HcParams p;  // n = 4, 20 iterations
  std::vector<float> mixes(24, 0.0f), base(24, 0.0f), scale = {1, 1, 1};
  std::vector<float> pre(4), post(4), comb(16);
  ASSERT_TRUE(HcSplitSinkhorn(p, mixes, scale, base, pre, post, comb).ok());
  for (float v : pre) EXPECT_FLOAT_EQ(v, 0.5f + 1e-6f);
  for (float v : post) EXPECT_EQ(v, 1.0f);
  for (float v : comb) EXPECT_NEAR(v, 0.25f, 1e-6f);
}

TEST(HcSplitSinkhorn, KnownTwoByTwoIterations) {
  // n = 2, comb logits [[0, ln 3], [0, 0]]: softmax rows [.25 .75], [.5 .5].
  std::vector<float> mixes = {0, 0, 0, 0, 0, std::log(3.0f), 0, 0};
  std::vector<float> base(8, 0.0f), scale = {1, 1, 1};
  base[0] = 0.5f;   // pre[0] = sigmoid(.5) + eps
  base[3] = 1.0f;   // post[1] = 2 sigmoid(1)
  std::vector<float> pre(2), post(2), comb(4);
  HcParams one{.hc_mult = 2, .sinkhorn_iters = 1};
  ASSERT_TRUE(HcSplitSinkhorn(one, mixes, scale, base, pre, post, comb).ok());
  EXPECT_NEAR(pre[0], 0.6224593f + 1e-6f, 1e-7f);
  EXPECT_NEAR(post[1], 1.4621172f, 1e-6f);
  // One iteration = softmax rows, then column normalization only.
  EXPECT_NEAR(comb[0], 0.3333333f, 1e-6f);
  EXPECT_NEAR(comb[1], 0.5999994f, 1e-6f);
  EXPECT_NEAR(comb[2], 0.6666653f, 1e-6f);
  EXPECT_NEAR(comb[3], 0.3999998f, 1e-6f);
  HcParams two{.hc_mult = 2, .sinkhorn_iters = 2};
  ASSERT_TRUE(HcSplitSinkhorn(two, mixes, scale, base, pre, post, comb).ok());
  EXPECT_NEAR(comb[0], 0.3636363f, 1e-6f);
  EXPECT_NEAR(comb[1], 0.6315780f, 1e-6f);
  EXPECT_NEAR(comb[2], 0.6363627f, 1e-6f);
  EXPECT_NEAR(comb[3], 0.3684210f, 1e-6f);
}

TEST(HcMix, DoublyStochasticAndScaleInvariant) {
  const int n = 4, d = 8, t = 2, n_mix = 24;
  std::mt19937 rng(8);
  std::normal_distribution<float> normal;
  std::vector<float> x(t * n * d), fn(n_mix * n * d), base(n_mix), scale = {0.5f, 0.7f, 0.3f};
  for (float& v : x) v = normal(rng);
  for (float& v : fn) v = 0.2f * normal(rng);
  for (float& v : base) v = normal(rng);
  std::vector<float> pre(t * n), post(t * n), comb(t * n * n);
  HcParams p;
  ASSERT_TRUE(HcMix(p, {.x = x, .hc_fn = fn, .scale = scale, .base = base, .pre = pre,
                        .post = post, .comb = comb, .tokens = t, .dim = d}).ok());
  for (int i = 0; i < t; ++i) {
    for (int a = 0; a < n; ++a) {
      float row = 0, col = 0;
      for (int b = 0; b < n; ++b) {
        row += comb[i * 16 + a * n + b];
        col += comb[i * 16 + b * n + a];
      }
      EXPECT_NEAR(col, 1.0f, 1e-5f);  // the last step normalizes columns
      EXPECT_NEAR(row, 1.0f, 1e-3f);
      EXPECT_GT(pre[i * n + a], 0.0f);
      EXPECT_LT(post[i * n + a], 2.0f);
    }
  }
  // mixes are RMS-normalized over the flattened streams: scaling X changes nothing.
  std::vector<float> x8 = x;
  for (float& v : x8) v *= 8.0f;
  std::vector<float> pre8(t * n), post8(t * n), comb8(t * n * n);
  ASSERT_TRUE(HcMix(p, {.x = x8, .hc_fn = fn, .scale = scale, .base = base, .pre = pre8,
                        .post = post8, .comb = comb8, .tokens = t, .dim = d}).ok());
  for (int i = 0; i < t * n; ++i) EXPECT_NEAR(pre[i], pre8[i], 1e-6f);
  for (int i = 0; i < t * n * n; ++i) EXPECT_NEAR(comb[i], comb8[i], 1e-6f);
}

TEST(HcMix, MixesUseTheRmsOfAllStreams) {
  // n = 1, d = 2, X = (3, 4): rms = sqrt(12.5); hc_fn row 0 = (1, 0) -> mix 3 / rms.
  std::vector<float> x = {3.0f, 4.0f}, fn(3 * 2, 0.0f), base(3, 0.0f), scale = {1, 1, 1};
  fn[0] = 1.0f;
  std::vector<float> pre(1), post(1), comb(1);
  HcParams p{.hc_mult = 1};
  ASSERT_TRUE(HcMix(p, {.x = x, .hc_fn = fn, .scale = scale, .base = base, .pre = pre,
                        .post = post, .comb = comb, .tokens = 1, .dim = 2}).ok());
  const float mix = 3.0f / std::sqrt(12.5f);
  EXPECT_NEAR(pre[0], 1.0f / (1.0f + std::exp(-mix)) + 1e-6f, 1e-6f);
  EXPECT_NEAR(comb[0], 1.0f, 1e-5f);
}

TEST(HcCollapseExpand, KnownValues) {
  // n = 2, d = 2. X0 = (1, 2), X1 = (3, 4).
  std::vector<float> x = {1, 2, 3, 4}, pre = {0.5f, 2.0f}, out(2);
  ASSERT_TRUE(HcCollapse(x, pre, 1, 2, 2, false, out).ok());
  EXPECT_EQ(out, (std::vector<float>{6.5f, 9.0f}));
  // comb[j][k]: new stream k = sum_j comb[j][k] X_j + post_k y.
  std::vector<float> y = {10, 20}, post = {1.0f, 0.5f}, comb = {0.25f, 0.75f, 0.5f, 0.0f};
  std::vector<float> expanded(4);
  ASSERT_TRUE(HcExpand(x, y, post, comb, 1, 2, 2, false, expanded).ok());
  EXPECT_EQ(expanded, (std::vector<float>{10 + 0.25f + 1.5f, 20 + 0.5f + 2.0f,  // k = 0
                                          5 + 0.75f, 10 + 1.5f}));           // k = 1
  // bf16 boundaries round the stored streams: 1 + 2^-9 is not a bf16.
  std::vector<float> odd = {1.0f + 1.0f / 512, 0, 0, 0}, one = {1.0f, 0.0f};
  ASSERT_TRUE(HcCollapse(odd, one, 1, 2, 2, true, out).ok());
  EXPECT_EQ(out[0], 1.0f);
}

TEST(Hc, RejectsBadArgs) {
  std::vector<float> m(24), b(24), s(3), pre(4), post(4), comb(16);
  EXPECT_FALSE(HcSplitSinkhorn({.sinkhorn_iters = 0}, m, s, b, pre, post, comb).ok());
  EXPECT_FALSE(HcSplitSinkhorn({.hc_mult = 3}, m, s, b, pre, post, comb).ok());
  std::vector<float> x(8), out(3);
  EXPECT_FALSE(HcCollapse(x, pre, 1, 4, 2, false, out).ok());
}

}  // namespace
}  // namespace weir::kernels::cpu
