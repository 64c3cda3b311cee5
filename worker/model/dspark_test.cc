// DSpark draft (spec §4.8) on a generated `tiny` checkpoint: 3 stages,
// block 5, window 8 (the stage rings wrap in these tests); batched drafts
// against drafts one sequence at a time, bit for bit.
#include "worker/model/dspark.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
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

// The index of the first value whose float bits differ, or -1 if all are
// equal (sizes differing count as a difference at the shorter size).
int64_t FirstBitDifference(const std::vector<float>& a, const std::vector<float>& b) {
  const size_t n = std::min(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    if (std::bit_cast<uint32_t>(a[i]) != std::bit_cast<uint32_t>(b[i])) {
      return static_cast<int64_t>(i);
    }
  }
  return a.size() == b.size() ? -1 : static_cast<int64_t>(n);
}

void ExpectSameDraft(const DraftResult& got, const DraftResult& want, const std::string& what) {
  EXPECT_EQ(got.tokens, want.tokens) << what;
  EXPECT_EQ(FirstBitDifference(got.confidence, want.confidence), -1) << what << " confidence";
  EXPECT_EQ(FirstBitDifference(got.logits, want.logits), -1) << what << " logits";
}

// One batched draft of several sequences (lengths 2, below, at and beyond the
// window of 8, so some rings wrap) equals drafting each alone, bit for bit,
// in any row order; on the default CpuOps, whose head sums in an order that
// depends on its row count.
TEST(DsparkTest, DraftBatchEqualsDraftsOneByOne) {
  auto model = Model::Create(Tiny().config(), Tiny());
  ASSERT_TRUE(model.ok()) << model.status();
  Model& m = **model;
  const std::vector<int> lengths = {2, 7, 20, 8, 31, 2};
  const std::vector<int64_t> next = {77, 5, 4095, 0, 1234, 77};
  std::vector<std::unique_ptr<SequenceState>> seqs;
  std::vector<const SequenceState*> states;
  for (size_t i = 0; i < lengths.size(); ++i) {
    seqs.push_back(m.NewSequence());
    ASSERT_TRUE(
        m.Forward(*seqs.back(), Tokens(lengths[i], static_cast<uint32_t>(100 + i)), 0).ok());
    states.push_back(seqs.back().get());
  }
  std::vector<DraftResult> alone;
  for (size_t i = 0; i < states.size(); ++i) {
    auto d = m.Draft(*states[i], next[i]);
    ASSERT_TRUE(d.ok()) << d.status();
    alone.push_back(*std::move(d));
  }
  // Rows 0 and 5 share a length and token but not a sequence.
  EXPECT_NE(FirstBitDifference(alone[0].logits, alone[5].logits), -1);
  const std::vector<absl::StatusOr<DraftResult>> batch = m.DraftBatch(states, next);
  ASSERT_EQ(batch.size(), states.size());
  for (size_t i = 0; i < states.size(); ++i) {
    ASSERT_TRUE(batch[i].ok()) << i << ": " << batch[i].status();
    ExpectSameDraft(*batch[i], alone[i], absl::StrCat("row ", i));
    EXPECT_EQ(states[i]->length(), lengths[i]);  // drafting does not advance
  }
  std::vector<const SequenceState*> reversed(states.rbegin(), states.rend());
  std::vector<int64_t> reversed_next(next.rbegin(), next.rend());
  const std::vector<absl::StatusOr<DraftResult>> back = m.DraftBatch(reversed, reversed_next);
  ASSERT_EQ(back.size(), states.size());
  for (size_t i = 0; i < states.size(); ++i) {
    ASSERT_TRUE(back[i].ok()) << back[i].status();
    ExpectSameDraft(*back[i], alone[states.size() - 1 - i], absl::StrCat("reversed row ", i));
  }
  EXPECT_TRUE(m.DraftBatch({}, {}).empty());
}

// A row that cannot draft gets Draft's error; the other rows of the batch
// still draft, as they would alone.
TEST(DsparkTest, BadRowsOfADraftBatchFailAlone) {
  auto model = Model::Create(Tiny().config(), Tiny());
  ASSERT_TRUE(model.ok()) << model.status();
  Model& m = **model;
  auto good = m.NewSequence();
  ASSERT_TRUE(m.Forward(*good, Tokens(11, 7), 0).ok());
  auto two = m.NewSequence();
  ASSERT_TRUE(m.Forward(*two, Tokens(2, 8), 0).ok());
  auto one = m.NewSequence();
  ASSERT_TRUE(m.Forward(*one, Tokens(1, 9), 0).ok());
  auto empty = m.NewSequence();
  auto broken = m.NewSequence();
  ASSERT_TRUE(m.Forward(*broken, Tokens(6, 10), 0).ok());
  broken->MarkBroken();
  const std::vector<const SequenceState*> states = {one.get(), good.get(), empty.get(), nullptr,
                                                    two.get(), good.get(), broken.get()};
  const std::vector<int64_t> next = {3, 42, 3, 3, 9, 4096, 3};
  const std::vector<absl::StatusOr<DraftResult>> batch = m.DraftBatch(states, next);
  ASSERT_EQ(batch.size(), states.size());
  for (size_t i : {0, 2, 3, 5, 6}) {
    EXPECT_EQ(batch[i].status().code(), absl::StatusCode::kInvalidArgument) << i;
  }
  EXPECT_EQ(batch[0].status().message(), m.Draft(*one, 3).status().message());
  auto want_good = m.Draft(*good, 42);
  auto want_two = m.Draft(*two, 9);
  ASSERT_TRUE(want_good.ok() && want_two.ok());
  ASSERT_TRUE(batch[1].ok()) << batch[1].status();
  ASSERT_TRUE(batch[4].ok()) << batch[4].status();
  ExpectSameDraft(*batch[1], *want_good, "good");
  ExpectSameDraft(*batch[4], *want_two, "two");
  // Spans of different sizes: every row fails.
  const std::vector<absl::StatusOr<DraftResult>> mismatched =
      m.DraftBatch(states, std::span(next).first(2));
  ASSERT_EQ(mismatched.size(), states.size());
  for (const auto& r : mismatched) {
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  }
}

}  // namespace
}  // namespace weir::model
