// kernels/cpu/sparse_attention_test.cc

#include "kernels/cpu/sparse_attention.h"

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace weir::kernels::cpu {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

struct OneQuery {
  std::vector<float> out;
  absl::Status Run(const std::vector<float>& q, const std::vector<float>& kv, float sink,
                   const std::vector<int32_t>& index, int d, float scale = 1.0f) {
    out.assign(d, -7.0f);
    std::vector<float> sinks = {sink};
    return SparseAttention({.q = q, .kv = kv, .sink = sinks, .index = index, .out = out,
                            .queries = 1, .heads = 1, .head_dim = d,
                            .kv_len = static_cast<int64_t>(kv.size()) / d,
                            .topk = static_cast<int>(index.size()), .scale = scale});
  }
};

TEST(SparseAttention, KnownTwoSlotSoftmaxWithoutSink) {
  // z = (1, 0): weights e^0 : e^-1 over kv0 = (1, 0), kv1 = (0, 1).
  OneQuery a;
  ASSERT_TRUE(a.Run({1, 0}, {1, 0, 0, 1}, kNegInf, {0, 1}, 2).ok());
  EXPECT_NEAR(a.out[0], 0.7310586f, 1e-6f);
  EXPECT_NEAR(a.out[1], 0.2689414f, 1e-6f);
}

TEST(SparseAttention, SinkTakesMassButNotTheMax) {
  // One slot with z = 0 and sink 0: o = kv / (1 + 1).
  OneQuery a;
  ASSERT_TRUE(a.Run({0, 0}, {4, -2}, 0.0f, {0}, 2).ok());
  EXPECT_EQ(a.out[0], 2.0f);
  EXPECT_EQ(a.out[1], -1.0f);
  // A huge sink is not subtracted from the scores: o underflows to 0, not NaN.
  ASSERT_TRUE(a.Run({0, 0}, {4, -2}, 200.0f, {0}, 2).ok());
  EXPECT_EQ(a.out[0], 0.0f);
}

TEST(SparseAttention, EmptySlotsAreSkippedAndAllEmptyGivesZero) {
  OneQuery a;
  ASSERT_TRUE(a.Run({1, 0}, {1, 0, 0, 1}, kNegInf, {-1, 1, -1}, 2).ok());
  EXPECT_EQ(a.out[0], 0.0f);
  EXPECT_EQ(a.out[1], 1.0f);
  ASSERT_TRUE(a.Run({1, 0}, {1, 0, 0, 1}, 3.0f, {-1, -1}, 2).ok());
  EXPECT_EQ(a.out, (std::vector<float>{0.0f, 0.0f}));
}

TEST(SparseAttention, MatchesDenseSoftmaxWithSinkColumn) {
  const int s_len = 3, heads = 4, d = 16, n = 10, k = 6;
  std::mt19937 rng(12);
  std::normal_distribution<float> normal;
  std::vector<float> q(s_len * heads * d), kv(n * d), sink(heads), out(s_len * heads * d);
  for (float& v : q) v = normal(rng);
  for (float& v : kv) v = normal(rng);
  for (float& v : sink) v = normal(rng);
  std::vector<int32_t> index = {0, 3, 5, -1, 9, 2, 1, 1, -1, -1, -1, 4, 8, 7, 6, 5, 4, 3};
  ASSERT_TRUE(SparseAttention({.q = q, .kv = kv, .sink = sink, .index = index, .out = out,
                               .queries = s_len, .heads = heads, .head_dim = d, .kv_len = n,
                               .topk = k}).ok());
  const double scale = 1.0 / std::sqrt(double(d));
  for (int s = 0; s < s_len; ++s) {
    for (int h = 0; h < heads; ++h) {
      // softmax over [z_valid..., sink]; output keeps only the KV terms.
      std::vector<double> z;
      std::vector<int> rows;
      for (int j = 0; j < k; ++j) {
        const int t = index[s * k + j];
        if (t < 0) continue;
        double dot = 0;
        for (int c = 0; c < d; ++c) dot += double(q[(s * heads + h) * d + c]) * kv[t * d + c];
        z.push_back(dot * scale);
        rows.push_back(t);
      }
      double denom = std::exp(double(sink[h]));
      for (double v : z) denom += std::exp(v);
      for (int c = 0; c < d; ++c) {
        double want = 0;
        for (size_t i = 0; i < z.size(); ++i) want += std::exp(z[i]) / denom * kv[rows[i] * d + c];
        ASSERT_NEAR(out[(s * heads + h) * d + c], want, 1e-5) << s << " " << h << " " << c;
      }
    }
  }
}

TEST(SparseAttention, RejectsOutOfRangeIndex) {
  OneQuery a;
  EXPECT_EQ(a.Run({1, 0}, {1, 0}, 0.0f, {1}, 2).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(a.Run({1, 0}, {1, 0}, 0.0f, {-2}, 2).code(), absl::StatusCode::kInvalidArgument);
}

TEST(WindowIndices, PrefillRowsAndDecodeRing) {
  std::vector<int32_t> prefill(5 * 3);
  ASSERT_TRUE(WindowIndices(0, 5, 3, prefill).ok());
  EXPECT_EQ(prefill, (std::vector<int32_t>{0, -1, -1, 0, 1, -1, 0, 1, 2, 1, 2, 3, 2, 3, 4}));
  std::vector<int32_t> ring(3);
  ASSERT_TRUE(WindowIndices(4, 1, 3, ring).ok());
  EXPECT_EQ(ring, (std::vector<int32_t>{2, 0, 1}));  // oldest slot first
  std::vector<int32_t> filling(4);
  ASSERT_TRUE(WindowIndices(1, 1, 4, filling).ok());
  EXPECT_EQ(filling, (std::vector<int32_t>{-1, -1, 0, 1}));
  EXPECT_FALSE(WindowIndices(3, 2, 4, filling).ok());  // decode is one token
  EXPECT_FALSE(WindowIndices(0, 3, 4, filling).ok());  // needs 3 x 3 entries
}

TEST(DsparkIndices, RingPrefixThenTheWholeBlock) {
  std::vector<int32_t> early(2 * 5);
  ASSERT_TRUE(DsparkIndices(2, 8, 2, early).ok());  // positions 0..2 written: 3 ring slots
  EXPECT_EQ(early, (std::vector<int32_t>{0, 1, 2, 8, 9, 0, 1, 2, 8, 9}));
  std::vector<int32_t> full(3 * 7);
  ASSERT_TRUE(DsparkIndices(100, 4, 3, full).ok());  // ring full: all 4 slots, then 4..6
  EXPECT_EQ(std::vector<int32_t>(full.begin(), full.begin() + 7),
            (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6}));
  EXPECT_FALSE(DsparkIndices(0, 4, 3, full).ok());
  EXPECT_FALSE(DsparkIndices(100, 4, 2, full).ok());
}

}  // namespace
}  // namespace weir::kernels::cpu
