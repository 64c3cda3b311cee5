// Contract tests of Model on a generated `tiny` checkpoint (window 8, ratio-2
// encoder sources, ratio-1 decoder with candidate pool and Reindex layers,
// Engram, 3 DSpark stages).
#include "worker/model/model.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/common/numeric_formats.h"
#include "worker/model/tiny_checkpoint.h"
#include "worker/model/tiny_model_test_util.h"

namespace weir::model {
namespace {

// One checkpoint per test binary (generation dominates the setup time).
const Checkpoint& Tiny() { return TinyCheckpoint(11); }

std::unique_ptr<Model> NewModel() { return NewModelOrFail(Tiny()); }

std::vector<int64_t> Tokens(int n, uint32_t seed) { return RandomTokens(n, seed); }

// Runs `tokens` in chunks of the given sizes; returns all logits.
std::vector<float> RunChunks(Model& model, SequenceState& seq, const std::vector<int64_t>& tokens,
                             const std::vector<int>& chunks) {
  std::vector<float> all;
  size_t pos = 0;
  for (int c : chunks) {
    std::span<const int64_t> part(tokens.data() + pos, c);
    auto logits = model.Forward(seq, part, static_cast<int64_t>(pos));
    EXPECT_TRUE(logits.ok()) << logits.status();
    if (!logits.ok()) return {};
    all.insert(all.end(), logits->begin(), logits->end());
    pos += c;
  }
  EXPECT_EQ(pos, tokens.size());
  return all;
}

// Max over rows of max|a - b| / max|b|.
double MaxRelDiff(const std::vector<float>& a, const std::vector<float>& b, int64_t vocab) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (size_t r = 0; r * vocab < std::min(a.size(), b.size()); ++r) {
    double diff = 0, scale = 1e-30;
    for (int64_t i = 0; i < vocab; ++i) {
      diff = std::max(diff, double{std::fabs(a[r * vocab + i] - b[r * vocab + i])});
      scale = std::max(scale, double{std::fabs(b[r * vocab + i])});
    }
    worst = std::max(worst, diff / scale);
  }
  return worst;
}

constexpr double kTol = 1e-4;
constexpr int64_t kVocab = 4096;

TEST(ModelTest, PrefillShapesAndFiniteLogits) {
  auto model = NewModel();
  ASSERT_NE(model, nullptr);
  auto seq = model->NewSequence();
  const std::vector<int64_t> tokens = Tokens(21, 1);
  auto logits = model->Forward(*seq, tokens, 0);
  ASSERT_TRUE(logits.ok()) << logits.status();
  ASSERT_EQ(logits->size(), tokens.size() * kVocab);
  for (float v : *logits) ASSERT_TRUE(std::isfinite(v));
  EXPECT_EQ(seq->length(), 21);
  // Different positions see different contexts: logits differ between rows.
  EXPECT_GT(MaxRelDiff(std::vector<float>(logits->begin(), logits->begin() + kVocab),
                       std::vector<float>(logits->end() - kVocab, logits->end()), kVocab),
            1e-3);
}

// On the CPU ops the products read bf16 forms of the weights (the same
// values: FP8 and MXFP4 weights all have them).
TEST(ModelTest, CpuProductsReadTheWeightsBf16Forms) {
  auto model = NewModel();
  ASSERT_NE(model, nullptr);
  const ModelWeights& w = model->weights();
  const AttentionWeights& a = w.layers[0].attn;
  for (const DenseWeight* d : {&a.wq_a, &a.wq_b, &a.wkv, &a.wo_b, &w.layers[0].ffn.shared.w1}) {
    ASSERT_EQ(d->w_bf16.size(), d->w.size());
    for (size_t i = 0; i < d->w.size(); i += 97) {
      ASSERT_EQ(kernels::Bf16BitsToFloat(d->w_bf16[i]), d->w[i]) << i;
    }
  }
  EXPECT_TRUE(w.head.w_bf16.empty());  // Logits do not read it
}

// 40 positions cross the window (8) many times, complete ratio-2 groups at
// odd positions, and exceed index_topk (8) and the candidate pool (4 blocks
// of 4) of the ratio-1 decoder layers.
TEST(ModelTest, ChunkedPrefillEqualsOneAtATime) {
  auto model = NewModel();
  ASSERT_NE(model, nullptr);
  const std::vector<int64_t> tokens = Tokens(40, 2);
  auto seq1 = model->NewSequence();
  const std::vector<float> one = RunChunks(*model, *seq1, tokens, std::vector<int>(40, 1));
  auto seq2 = model->NewSequence();
  const std::vector<float> whole = RunChunks(*model, *seq2, tokens, {40});
  auto seq3 = model->NewSequence();
  const std::vector<float> mixed = RunChunks(*model, *seq3, tokens, {3, 1, 8, 9, 2, 17});
  std::printf("max relative logit difference: whole %.3g, mixed %.3g\n",
              MaxRelDiff(whole, one, kVocab), MaxRelDiff(mixed, one, kVocab));
  EXPECT_LT(MaxRelDiff(whole, one, kVocab), kTol);
  EXPECT_LT(MaxRelDiff(mixed, one, kVocab), kTol);

}

// The candidate pool (4 blocks of 4 entries at the ratio-1 decoder) only
// restricts the Reindex layers once a query sees more than 16 entries: with
// the pool disabled, positions 0..15 are unchanged and later ones differ.
TEST(ModelTest, CandidatePoolRestrictsReindexLayersOnlyBeyondItsSize) {
  auto model = NewModel();
  ASSERT_NE(model, nullptr);
  ModelConfig no_pool = Tiny().config();
  no_pool.candidate_source_layer = -1;
  auto other = Model::Create(no_pool, Tiny());
  ASSERT_TRUE(other.ok()) << other.status();
  const std::vector<int64_t> tokens = Tokens(28, 8);
  auto s1 = model->NewSequence();
  auto s2 = (*other)->NewSequence();
  const std::vector<float> with = RunChunks(*model, *s1, tokens, {28});
  const std::vector<float> without = RunChunks(**other, *s2, tokens, {28});
  const int64_t pool = 16;
  auto rows = [&](const std::vector<float>& v, int64_t a, int64_t b) {
    return std::vector<float>(v.begin() + a * kVocab, v.begin() + b * kVocab);
  };
  EXPECT_LT(MaxRelDiff(rows(with, 0, pool), rows(without, 0, pool), kVocab), kTol);
  EXPECT_GT(MaxRelDiff(rows(with, pool, 28), rows(without, pool, 28), kVocab), 1e-3);
}

TEST(ModelTest, RandomChunkingsAgree) {
  auto model = NewModel();
  ASSERT_NE(model, nullptr);
  const std::vector<int64_t> tokens = Tokens(33, 3);
  auto ref_seq = model->NewSequence();
  const std::vector<float> ref = RunChunks(*model, *ref_seq, tokens, {33});
  std::mt19937 gen(5);
  for (int trial = 0; trial < 4; ++trial) {
    std::vector<int> chunks;
    for (int left = 33; left > 0;) {
      const int c = std::min<int>(left, 1 + static_cast<int>(gen() % 11));
      chunks.push_back(c);
      left -= c;
    }
    auto seq = model->NewSequence();
    EXPECT_LT(MaxRelDiff(RunChunks(*model, *seq, tokens, chunks), ref, kVocab), kTol)
        << "trial " << trial;
  }
}

TEST(ModelTest, RollbackThenReplayEqualsNeverDrafted) {
  auto model = NewModel();
  ASSERT_NE(model, nullptr);
  const std::vector<int64_t> tokens = Tokens(30, 4);
  auto ref_seq = model->NewSequence();
  const std::vector<float> ref = RunChunks(*model, *ref_seq, tokens, {19, 1, 10});

  auto seq = model->NewSequence();
  ASSERT_TRUE(model->Forward(*seq, std::span(tokens).first(19), 0).ok());
  for (int k : {6, 1, 3}) {  // reject blocks of several sizes at odd and even lengths
    const std::vector<int64_t> junk = Tokens(k, 100 + k);
    const int64_t at = seq->length();
    ASSERT_TRUE(model->Forward(*seq, junk, at).ok());
    ASSERT_TRUE(seq->Rollback(k).ok());
    EXPECT_EQ(seq->length(), at);
  }
  std::vector<float> replay;
  for (int64_t p = 19; p < 30; p += 1) {
    auto l = model->Forward(*seq, std::span(tokens).subspan(p, 1), p);
    ASSERT_TRUE(l.ok()) << l.status();
    replay.insert(replay.end(), l->begin(), l->end());
  }
  EXPECT_LT(MaxRelDiff(replay, std::vector<float>(ref.begin() + 19 * kVocab, ref.end()), kVocab),
            kTol);
}

TEST(ModelTest, DeterministicAcrossModelsAndSequences) {
  auto a = NewModel();
  auto b = NewModel();
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  const std::vector<int64_t> tokens = Tokens(12, 6);
  auto sa = a->NewSequence();
  auto sb = b->NewSequence();
  const std::vector<float> la = RunChunks(*a, *sa, tokens, {5, 7});
  const std::vector<float> lb = RunChunks(*b, *sb, tokens, {5, 7});
  ASSERT_EQ(la.size(), lb.size());
  EXPECT_EQ(0, std::memcmp(la.data(), lb.data(), la.size() * sizeof(float)));
}

TEST(ModelTest, BadInputIsInvalidArgumentAndLeavesStateUsable) {
  auto model = NewModel();
  ASSERT_NE(model, nullptr);
  auto seq = model->NewSequence();
  const int64_t too_big[] = {1, kVocab};
  const int64_t negative[] = {-1};
  const int64_t ok[] = {7, 8};
  EXPECT_EQ(model->Forward(*seq, too_big, 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(model->Forward(*seq, negative, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(model->Forward(*seq, {}, 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(model->Forward(*seq, ok, 3).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(seq->length(), 0);
  ASSERT_TRUE(model->Forward(*seq, ok, 0).ok());
  EXPECT_EQ(model->Forward(*seq, ok, 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(seq->Rollback(3).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(seq->Rollback(-1).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(seq->length(), 2);
  EXPECT_TRUE(model->Forward(*seq, ok, 2).ok());
}

TEST(ModelTest, ExpertLoadCountsEveryRoutedToken) {
  auto model = NewModel();
  ASSERT_NE(model, nullptr);
  auto seq = model->NewSequence();
  ASSERT_TRUE(model->Forward(*seq, Tokens(10, 7), 0).ok());
  const ModelConfig& c = model->config();
  for (int layer = 0; layer < c.n_layers; ++layer) {
    int64_t total = 0;
    for (int64_t n : model->expert_load().layer_counts(layer)) total += n;
    EXPECT_EQ(total, 10 * c.n_activated_experts) << "layer " << layer;
  }
}

}  // namespace
}  // namespace weir::model
