// DSpark draft (spec §4.8) on a generated `tiny` checkpoint: 3 stages,
// block 5, window 8 (the stage rings wrap in these tests).
#include "worker/model/dspark.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "worker/model/model.h"
#include "worker/model/tiny_checkpoint.h"
#include "worker/model/tiny_model_test_util.h"

namespace weir::model {
namespace {

const Checkpoint& Tiny() { return TinyCheckpoint(12); }

std::vector<int64_t> Tokens(int n, uint32_t seed) { return RandomTokens(n, seed, 4094); }

double MaxRelDiff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double diff = 0, scale = 1e-30;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    diff = std::max(diff, double{std::fabs(a[i] - b[i])});
    scale = std::max(scale, double{std::fabs(b[i])});
  }
  return diff / scale;
}

TEST(DsparkTest, DraftsFiveTokensWithConfidences) {
  auto model = Model::Create(Tiny().config(), Tiny());
  ASSERT_TRUE(model.ok()) << model.status();
  auto seq = (*model)->NewSequence();
  ASSERT_TRUE((*model)->Forward(*seq, Tokens(20, 1), 0).ok());
  auto d = (*model)->Draft(*seq, 77);
  ASSERT_TRUE(d.ok()) << d.status();
  const int64_t vocab = (*model)->config().vocab_size;
  ASSERT_EQ(d->tokens.size(), 5u);
  ASSERT_EQ(d->confidence.size(), 5u);
  ASSERT_EQ(d->logits.size(), 5u * vocab);
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_TRUE(std::isfinite(d->confidence[i]));
    const float* row = d->logits.data() + i * vocab;
    for (int64_t t = 0; t < vocab; ++t) ASSERT_TRUE(std::isfinite(row[t]));
    EXPECT_EQ(d->tokens[i], std::max_element(row, row + vocab) - row) << i;
  }
  EXPECT_EQ(seq->length(), 20);  // drafting does not advance the sequence
  // Deterministic and stateless: the same call gives the same bits.
  auto again = (*model)->Draft(*seq, 77);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->tokens, d->tokens);
  EXPECT_EQ(again->confidence, d->confidence);
  // The first input token matters.
  auto other = (*model)->Draft(*seq, 78);
  ASSERT_TRUE(other.ok());
  EXPECT_GT(MaxRelDiff(other->logits, d->logits), 1e-3);
}

// The stage rings are filled by every target forward, so a draft after a
// chunked prefill equals a draft after token-by-token decoding, and a draft
// after rejected drafts were rolled back equals one that never saw them.
TEST(DsparkTest, DraftIndependentOfChunkingAndRollback) {
  auto model = Model::Create(Tiny().config(), Tiny());
  ASSERT_TRUE(model.ok()) << model.status();
  Model& m = **model;
  const std::vector<int64_t> tokens = Tokens(19, 2);
  auto whole = m.NewSequence();
  ASSERT_TRUE(m.Forward(*whole, tokens, 0).ok());
  auto ones = m.NewSequence();
  for (int64_t p = 0; p < 19; ++p) {
    ASSERT_TRUE(m.Forward(*ones, std::span(tokens).subspan(p, 1), p).ok());
  }
  auto rolled = m.NewSequence();
  ASSERT_TRUE(m.Forward(*rolled, std::span(tokens).first(14), 0).ok());
  ASSERT_TRUE(m.Forward(*rolled, Tokens(6, 9), 14).ok());
  ASSERT_TRUE(rolled->Rollback(6).ok());
  ASSERT_TRUE(m.Forward(*rolled, std::span(tokens).subspan(14), 14).ok());

  auto a = m.Draft(*whole, 5);
  auto b = m.Draft(*ones, 5);
  auto c = m.Draft(*rolled, 5);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_LT(MaxRelDiff(a->logits, b->logits), 1e-4);
  EXPECT_LT(MaxRelDiff(c->logits, b->logits), 1e-4);
  EXPECT_LT(MaxRelDiff(a->confidence, b->confidence), 1e-4);
  EXPECT_EQ(a->tokens, b->tokens);
  EXPECT_EQ(c->tokens, b->tokens);
}

TEST(DsparkTest, BadDraftRequestsAreInvalidArgument) {
  auto model = Model::Create(Tiny().config(), Tiny());
  ASSERT_TRUE(model.ok()) << model.status();
  auto seq = (*model)->NewSequence();
  EXPECT_EQ((*model)->Draft(*seq, 1).status().code(), absl::StatusCode::kInvalidArgument);
  const int64_t one[] = {3};
  ASSERT_TRUE((*model)->Forward(*seq, one, 0).ok());
  EXPECT_EQ((*model)->Draft(*seq, 1).status().code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE((*model)->Forward(*seq, one, 1).ok());
  EXPECT_EQ((*model)->Draft(*seq, 4096).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*model)->Draft(*seq, -2).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE((*model)->Draft(*seq, 1).ok());
}

}  // namespace
}  // namespace weir::model
