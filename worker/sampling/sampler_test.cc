#include "worker/sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace weir::worker::sampling {
namespace {

SampleRow Row(const std::vector<float>& logits, const SamplingParams& params,
              int64_t position = 0) {
  SampleRow row;
  row.logits = logits.data();
  row.params = &params;
  row.position = position;
  return row;
}

int32_t SampleOne(const std::vector<float>& logits, const SamplingParams& params,
                  int64_t position = 0) {
  SampleRow row = Row(logits, params, position);
  std::vector<SampleResult> r = SampleBatch({&row, 1}, static_cast<int32_t>(logits.size()));
  EXPECT_TRUE(r[0].status.ok()) << r[0].status;
  return r[0].token;
}

TEST(SamplerTest, GreedyTakesArgmaxWithTiesToLowestId) {
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  EXPECT_EQ(SampleOne({0.1f, 3.0f, -1.0f, 3.0f}, greedy), 1);
  SampleRow row = Row({0.0f, std::log(3.0f)}, greedy);
  std::vector<float> logits = {0.0f, std::log(3.0f)};
  row.logits = logits.data();
  SampleResult r = SampleBatch({&row, 1}, 2)[0];
  EXPECT_EQ(r.token, 1);
  EXPECT_NEAR(r.logprob, std::log(0.75f), 1e-6);
}

TEST(SamplerTest, TopKOneAndTinyTopPAreGreedy) {
  const std::vector<float> logits = {0.5f, 2.0f, 1.9f, -3.0f};
  SamplingParams top1;
  top1.top_k = 1;
  SamplingParams tiny_p;
  tiny_p.top_p = 1e-6f;
  for (int64_t pos = 0; pos < 50; ++pos) {
    EXPECT_EQ(SampleOne(logits, top1, pos), 1);
    EXPECT_EQ(SampleOne(logits, tiny_p, pos), 1);
  }
}

TEST(SamplerTest, MinPDropsUnlikelyTokens) {
  // Probabilities 0.5, 0.25, 0.25 * e^-5 ...: min_p 0.4 keeps only the top two.
  const std::vector<float> logits = {std::log(2.0f), 0.0f, -5.0f, -5.0f};
  SamplingParams params;
  params.min_p = 0.4f;
  for (int64_t pos = 0; pos < 200; ++pos) EXPECT_LT(SampleOne(logits, params, pos), 2);
}

TEST(SamplerTest, EmpiricalFrequenciesFollowSoftmax) {
  const std::vector<float> logits = {1.0f, 0.0f, -1.0f, 0.5f};
  SamplingParams params;
  params.temperature = 1.0f;
  params.seed = 42;
  std::vector<int> counts(4, 0);
  const int n = 40000;
  for (int64_t pos = 0; pos < n; ++pos) ++counts[SampleOne(logits, params, pos)];
  double z = 0.0;
  for (float l : logits) z += std::exp(l);
  for (int i = 0; i < 4; ++i) {
    const double expected = std::exp(logits[i]) / z;
    // 5 standard deviations of a binomial proportion; the seed is fixed.
    const double sigma = std::sqrt(expected * (1 - expected) / n);
    EXPECT_NEAR(counts[i] / static_cast<double>(n), expected, 5 * sigma) << "token " << i;
  }
}

TEST(SamplerTest, TemperatureSharpens) {
  const std::vector<float> logits = {1.0f, 0.0f};
  SamplingParams cold;
  cold.temperature = 0.05f;
  int top = 0;
  for (int64_t pos = 0; pos < 1000; ++pos) top += SampleOne(logits, cold, pos) == 0;
  EXPECT_GT(top, 995);  // P(token 1) = e^-20.
}

TEST(SamplerTest, SeededDrawIgnoresBatchCompositionAndOrder) {
  std::vector<float> a(64), b(64), c(64);
  for (int i = 0; i < 64; ++i) {
    a[i] = std::sin(i * 0.7f);
    b[i] = std::cos(i * 0.3f);
    c[i] = 0.01f * i;
  }
  SamplingParams pa, pb, pc;
  pa.seed = 7;
  pb.seed = 8;
  pc.seed = 9;
  SampleRow ra = Row(a, pa, 10), rb = Row(b, pb, 3), rc = Row(c, pc, 99);
  const int32_t alone = SampleBatch({&ra, 1}, 64)[0].token;
  std::vector<SampleRow> batch = {rb, rc, ra};
  EXPECT_EQ(SampleBatch(batch, 64)[2].token, alone);
  // Draft and target draws at the same position differ in identity.
  EXPECT_NE(DrawUniform(7, 10, false), DrawUniform(7, 10, true));
  EXPECT_EQ(DrawUniform(7, 10, false), DrawUniform(7, 10, false));
}

TEST(SamplerTest, PenaltiesAndBias) {
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  std::vector<float> logits = {2.0f, 1.5f, 0.0f};
  std::vector<int32_t> output = {0, 0};
  SampleRow row = Row(logits, greedy);
  row.output_tokens = output;
  EXPECT_EQ(SampleBatch({&row, 1}, 3)[0].token, 0);

  SamplingParams rep = greedy;
  rep.repetition_penalty = 2.0f;  // 2.0 -> 1.0 < 1.5
  row.params = &rep;
  EXPECT_EQ(SampleBatch({&row, 1}, 3)[0].token, 1);

  SamplingParams freq = greedy;
  freq.frequency_penalty = 0.3f;  // 2.0 - 0.6 = 1.4 < 1.5
  row.params = &freq;
  EXPECT_EQ(SampleBatch({&row, 1}, 3)[0].token, 1);

  SamplingParams presence = greedy;
  presence.presence_penalty = 0.4f;  // once: 1.6 > 1.5
  row.params = &presence;
  EXPECT_EQ(SampleBatch({&row, 1}, 3)[0].token, 0);

  SamplingParams bias = greedy;
  bias.logit_bias = {{2, 500.0f}};  // Clamped to +100: still wins.
  row.params = &bias;
  SampleResult r = SampleBatch({&row, 1}, 3)[0];
  EXPECT_EQ(r.token, 2);
  SamplingParams ban;
  ban.logit_bias = {{0, -100.0f}, {1, -100.0f}};
  row.params = &ban;
  for (int64_t pos = 0; pos < 20; ++pos) {
    row.position = pos;
    EXPECT_EQ(SampleBatch({&row, 1}, 3)[0].token, 2);
  }
}

TEST(SamplerTest, BadRowsFailAloneWithoutHarmingOthers) {
  SamplingParams params;
  std::vector<float> good = {0.0f, 1.0f};
  std::vector<float> nan = {std::nanf(""), 1.0f};
  std::vector<float> masked(2, -std::numeric_limits<float>::infinity());
  std::vector<SampleRow> rows = {Row(nan, params), Row(good, params), Row(masked, params),
                                 SampleRow{}};
  std::vector<SampleResult> r = SampleBatch(rows, 2);
  EXPECT_EQ(r[0].status.code(), absl::StatusCode::kInternal);
  EXPECT_NE(r[0].status.message().find("NUMERICAL_ERROR"), std::string::npos);
  EXPECT_EQ(r[0].token, -1);
  EXPECT_TRUE(r[1].status.ok());
  EXPECT_GE(r[1].token, 0);
  EXPECT_EQ(r[2].status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r[3].status.code(), absl::StatusCode::kInvalidArgument);
}

// The sampler as first written, plainly: a copy of the row, the argmax by a
// scan keeping the first strictly greater value, every candidate sorted by
// (logit desc, id), the total summed in that order. The fast paths must
// choose the same tokens.
int32_t PlainSample(const std::vector<float>& in, const SamplingParams& p, int64_t position) {
  std::vector<float> logits = in;
  const int32_t vocab = static_cast<int32_t>(logits.size());
  int32_t best = 0;
  for (int32_t i = 1; i < vocab; ++i) {
    if (logits[i] > logits[best]) best = i;
  }
  if (p.temperature == 0.0f) return best;
  for (float& v : logits) v /= p.temperature;
  std::vector<int32_t> order(vocab);
  for (int32_t i = 0; i < vocab; ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  size_t keep = p.top_k > 0 && p.top_k < vocab ? static_cast<size_t>(p.top_k) : vocab;
  std::vector<double> probs(keep);
  double total = 0.0;
  for (size_t i = 0; i < keep; ++i) {
    probs[i] = std::exp(static_cast<double>(logits[order[i]]) - logits[best]);
    total += probs[i];
  }
  if (p.top_p < 1.0f) {
    double mass = 0.0;
    size_t n = 0;
    while (n < keep) {
      mass += probs[n++];
      if (mass >= p.top_p * total) break;
    }
    keep = n;
  }
  if (p.min_p > 0.0f) {
    size_t n = 1;
    while (n < keep && probs[n] >= p.min_p * probs[0]) ++n;
    keep = n;
  }
  double kept = 0.0;
  for (size_t i = 0; i < keep; ++i) kept += probs[i];
  const double target = DrawUniform(p.seed, position, false) * kept;
  double cumulative = 0.0;
  for (size_t i = 0; i < keep; ++i) {
    cumulative += probs[i];
    if (target < cumulative) return order[i];
  }
  return order[keep - 1];
}

// Greedy reads the row once (eight lanes, then a search): the first maximum
// whatever the row's length (multiples of 8 or not), ties (also across
// lanes), -inf entries and a maximum in the tail; NaN / +inf anywhere is
// NUMERICAL_ERROR, a row of -inf is masked. Without want_logprob the
// logprob is 0 and the token the same.
TEST(SamplerTest, GreedyScanFindsTheFirstMaximum) {
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> small(-3, 3);  // many ties
  for (int32_t n : {1, 3, 7, 8, 9, 16, 21, 4096, 4101}) {
    for (int trial = 0; trial < 20; ++trial) {
      std::vector<float> row(n);
      for (float& v : row) v = static_cast<float>(small(rng));
      if (trial % 4 == 1 && n > 1) row[rng() % n] = -std::numeric_limits<float>::infinity();
      if (trial % 4 == 2) row[n - 1] = 9.0f;  // the maximum in the tail
      ASSERT_EQ(SampleOne(row, greedy), PlainSample(row, greedy, 0)) << n << " " << trial;
      SampleRow no_logprob = Row(row, greedy);
      no_logprob.want_logprob = false;
      const SampleResult r = SampleBatch({&no_logprob, 1}, n)[0];
      EXPECT_EQ(r.token, PlainSample(row, greedy, 0));
      EXPECT_EQ(r.logprob, 0.0f);
    }
    for (int32_t at : {0, n / 2, n - 1}) {
      for (float bad :
           {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
        std::vector<float> row(n, 1.0f);
        row[at] = bad;
        SampleRow r = Row(row, greedy);
        EXPECT_EQ(SampleBatch({&r, 1}, n)[0].status.code(), absl::StatusCode::kInternal)
            << n << " at " << at;
      }
    }
    std::vector<float> masked(n, -std::numeric_limits<float>::infinity());
    SampleRow r = Row(masked, greedy);
    EXPECT_EQ(SampleBatch({&r, 1}, n)[0].status.code(), absl::StatusCode::kInvalidArgument);
  }
}

// Seeded draws with top-k, top-p and min-p sort only the candidates they
// look at: the tokens equal the fully sorted sampler's over 4,096-token rows
// (broad and peaked) at many positions.
TEST(SamplerTest, PartlySortedDrawsEqualTheFullySortedOnes) {
  std::mt19937 rng(11);
  for (float scale : {1.0f, 3.0f, 8.0f}) {
    std::normal_distribution<float> normal(0.0f, scale);
    std::vector<float> row(4096);
    for (float& v : row) v = normal(rng);
    for (int variant = 0; variant < 5; ++variant) {
      SamplingParams p;
      p.temperature = 0.8f;
      p.seed = 3 + variant;
      if (variant == 1) p.top_k = 40;
      if (variant == 2) p.top_p = 0.9f;
      if (variant == 3) p.min_p = 0.05f;
      if (variant == 4) {
        p.top_k = 2000;
        p.top_p = 0.97f;
      }
      for (int64_t position = 0; position < 200; ++position) {
        ASSERT_EQ(SampleOne(row, p, position), PlainSample(row, p, position))
            << "scale " << scale << " variant " << variant << " position " << position;
      }
    }
  }
}

// A batch of 2^19 logits or more is split over the sampler threads: every
// row's result (token, logprob bits, status) equals the row sampled alone,
// with 3 threads, with concurrent callers (one of them gets the threads, the
// others run alone) and with none.
TEST(SamplerTest, ThreadsGiveEachRowItsOwnResult) {
  constexpr int32_t kVocab = 20000;
  constexpr int kRows = 40;  // 800,000 logits
  std::mt19937 rng(17);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<std::vector<float>> logits(kRows, std::vector<float>(kVocab));
  for (auto& row : logits) {
    for (float& v : row) v = normal(rng);
  }
  logits[7][123] = std::numeric_limits<float>::quiet_NaN();  // a bad row fails alone
  std::vector<SamplingParams> params(kRows);
  const std::vector<int32_t> output = {5, 9, 9, 300, 17};
  std::vector<SampleRow> rows(kRows);
  for (int r = 0; r < kRows; ++r) {
    SamplingParams& p = params[r];
    p.temperature = r % 3 == 0 ? 0.0f : 0.7f;
    p.seed = 100 + r;
    if (r % 4 == 1) p.top_p = 0.9f;
    if (r % 5 == 2) p.repetition_penalty = 1.2f;
    if (r % 6 == 3) p.top_k = 20;
    rows[r] = {.logits = logits[r].data(),
               .params = &p,
               .output_tokens = output,
               .position = 40 + r,
               .want_logprob = r % 2 == 0};
  }
  std::vector<SampleResult> alone;
  for (const SampleRow& row : rows) alone.push_back(SampleBatch({&row, 1}, kVocab)[0]);
  auto expect_same = [&](const std::vector<SampleResult>& got, const char* how) {
    ASSERT_EQ(got.size(), alone.size());
    for (int r = 0; r < kRows; ++r) {
      EXPECT_EQ(got[r].token, alone[r].token) << how << " row " << r;
      EXPECT_EQ(std::memcmp(&got[r].logprob, &alone[r].logprob, sizeof(float)), 0)
          << how << " row " << r;
      EXPECT_EQ(got[r].status.code(), alone[r].status.code()) << how << " row " << r;
    }
  };
  EXPECT_EQ(alone[7].status.code(), absl::StatusCode::kInternal);
  ASSERT_TRUE(SetSamplerThreads(3).ok());
  EXPECT_EQ(SamplerThreadCount(), 3);
  expect_same(SampleBatch(rows, kVocab), "3 threads");
  std::vector<std::vector<SampleResult>> concurrent(4);
  std::vector<std::thread> callers;
  for (int t = 0; t < 4; ++t) {
    callers.emplace_back([&, t] {
      for (int k = 0; k < 3; ++k) concurrent[t] = SampleBatch(rows, kVocab);
    });
  }
  for (std::thread& t : callers) t.join();
  for (const auto& got : concurrent) expect_same(got, "concurrent callers");
  ASSERT_TRUE(SetSamplerThreads(0).ok());
  EXPECT_EQ(SamplerThreadCount(), 0);
  expect_same(SampleBatch(rows, kVocab), "no threads");
  EXPECT_EQ(SetSamplerThreads(-2).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SetSamplerThreads(257).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(SetSamplerThreads(-1).ok());
}

TEST(SamplingParamsTest, RejectsOutOfRangeValues) {
  SamplingLimits limits{.vocab_size = 100, .max_logit_bias_entries = 2};
  EXPECT_TRUE(ValidateSamplingParams(SamplingParams{}, limits).ok());
  auto bad = [&](auto mutate) {
    SamplingParams p;
    mutate(p);
    return ValidateSamplingParams(p, limits).code() == absl::StatusCode::kInvalidArgument;
  };
  EXPECT_TRUE(bad([](SamplingParams& p) { p.temperature = -1; }));
  EXPECT_TRUE(bad([](SamplingParams& p) { p.temperature = std::nanf(""); }));
  EXPECT_TRUE(bad([](SamplingParams& p) { p.temperature = INFINITY; }));
  EXPECT_TRUE(bad([](SamplingParams& p) { p.top_p = 0; }));
  EXPECT_TRUE(bad([](SamplingParams& p) { p.top_p = 1.5f; }));
  EXPECT_TRUE(bad([](SamplingParams& p) { p.top_p = std::nanf(""); }));
  EXPECT_TRUE(bad([](SamplingParams& p) { p.top_k = -1; }));
  EXPECT_TRUE(bad([](SamplingParams& p) { p.min_p = 2; }));
  EXPECT_TRUE(bad([](SamplingParams& p) { p.repetition_penalty = 0; }));
  EXPECT_TRUE(bad([](SamplingParams& p) { p.frequency_penalty = 3; }));
  EXPECT_TRUE(bad([](SamplingParams& p) { p.presence_penalty = std::nanf(""); }));
  EXPECT_TRUE(bad([](SamplingParams& p) { p.logit_bias = {{100, 1.0f}}; }));
  EXPECT_TRUE(bad([](SamplingParams& p) { p.logit_bias = {{-1, 1.0f}}; }));
  EXPECT_TRUE(bad([](SamplingParams& p) { p.logit_bias = {{1, NAN}}; }));
  EXPECT_TRUE(bad([](SamplingParams& p) { p.logit_bias = {{1, 1}, {2, 1}, {3, 1}}; }));
  SamplingParams p;
  p.top_p = 0.0f;
  EXPECT_NE(ValidateSamplingParams(p, limits).message().find("top_p"), std::string::npos);
  p.top_p = 1.0f;
  p.logit_bias = {{5, 1000.0f}};  // Large biases are clamped, not refused.
  EXPECT_TRUE(ValidateSamplingParams(p, limits).ok());
}

}  // namespace
}  // namespace weir::worker::sampling
