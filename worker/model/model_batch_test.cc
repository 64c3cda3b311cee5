// Model::ForwardBatch on a generated `tiny` checkpoint: a batch of rows (mixed
// prefill and decode) equals each row's Forward alone, bit for bit; bad rows
// are rejected without touching any state.
#include <algorithm>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "worker/model/ep_schedule_test_util.h"
#include "worker/model/model.h"
#include "worker/model/tiny_checkpoint.h"
#include "worker/model/tiny_model_test_util.h"

namespace weir::model {
namespace {

const Checkpoint& Tiny() { return TinyCheckpoint(11); }

std::unique_ptr<Model> NewModel() { return NewModelOrFail(Tiny()); }

std::vector<int64_t> Tokens(int n, uint32_t seed) { return RandomTokens(n, seed); }

TEST(ModelBatchTest, BatchEqualsRowsAloneBitwise) {
  // Rows start at different steps, so batches mix prefills with decodes;
  // prompts cross the window (8) and ratio-2 groups.
  const std::vector<ScheduledSequence> schedule = {
      {.rank = 0, .start_step = 0, .prompt = Tokens(11, 1), .decode_steps = 6},
      {.rank = 0, .start_step = 0, .prompt = Tokens(3, 2), .decode_steps = 4},
      {.rank = 0, .start_step = 2, .prompt = Tokens(17, 3), .decode_steps = 3},
      {.rank = 0, .start_step = 3, .prompt = Tokens(1, 4), .decode_steps = 2},
  };
  auto batched = NewModel(), alone = NewModel();
  ASSERT_NE(batched, nullptr);
  std::vector<int> rows;
  auto got = RunRankSchedule(*batched, schedule, 0, &rows);
  ASSERT_TRUE(got.ok()) << got.status();
  auto want = RunReferenceSchedule(*alone, schedule);
  ASSERT_TRUE(want.ok()) << want.status();
  EXPECT_EQ(rows, (std::vector<int>{2, 2, 3, 4, 4, 3, 1}));
  for (size_t i = 0; i < schedule.size(); ++i) {
    EXPECT_EQ((*got)[i].tokens, (*want)[i].tokens) << "sequence " << i;
    EXPECT_EQ((*got)[i].last_logits, (*want)[i].last_logits) << "sequence " << i;
  }
  // The same (token, expert) pairs were routed.
  for (int layer = 0; layer < batched->expert_load().num_layers(); ++layer) {
    EXPECT_EQ(batched->expert_load().layer_counts(layer), alone->expert_load().layer_counts(layer))
        << "layer " << layer;
  }
}

TEST(ModelBatchTest, AllPositionsOfAPrefillRowMatch) {
  auto batched = NewModel(), alone = NewModel();
  ASSERT_NE(batched, nullptr);
  const std::vector<int64_t> a = Tokens(9, 5), b = Tokens(14, 6);
  auto sa = batched->NewSequence(), sb = batched->NewSequence();
  SequenceState* states[] = {sa.get(), sb.get()};
  const std::span<const int64_t> rows[] = {a, b};
  const int64_t starts[] = {0, 0};
  auto got = batched->ForwardBatch(states, rows, starts);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), 2u);
  auto ra = alone->NewSequence(), rb = alone->NewSequence();
  auto wa = alone->Forward(*ra, a, 0), wb = alone->Forward(*rb, b, 0);
  ASSERT_TRUE(wa.ok() && wb.ok());
  EXPECT_EQ((*got)[0], *wa);
  EXPECT_EQ((*got)[1], *wb);
  EXPECT_EQ(sa->length(), 9);
  EXPECT_EQ(sb->length(), 14);
}

// logits_from: each row returns the suffix of its logits that it asks for
// (all, the last, none, from the middle), equal bit for bit to that suffix of
// the whole row's on a row-stable head, and the states advance as without it;
// the forward itself (the next step's logits) is unchanged.
TEST(ModelBatchTest, LogitsFromReturnsTheSuffixAskedFor) {
  auto asked = RowStableCpuModel(Tiny(), ActivationPrecision::kBf16);
  auto whole = RowStableCpuModel(Tiny(), ActivationPrecision::kBf16);
  ASSERT_NE(asked, nullptr);
  ASSERT_NE(whole, nullptr);
  const int64_t v = Tiny().config().vocab_size;
  const std::vector<std::vector<int64_t>> prompts = {Tokens(9, 5), Tokens(14, 6), Tokens(5, 7),
                                                     Tokens(11, 8)};
  const std::vector<int64_t> from = {0, 13, 5, 4};  // all, the last, none, a suffix of 7
  std::vector<std::unique_ptr<SequenceState>> sa, sw;
  std::vector<SequenceState*> pa, pw;
  std::vector<std::span<const int64_t>> rows;
  for (const auto& p : prompts) {
    sa.push_back(asked->NewSequence());
    sw.push_back(whole->NewSequence());
    pa.push_back(sa.back().get());
    pw.push_back(sw.back().get());
    rows.emplace_back(p);
  }
  const std::vector<int64_t> starts(prompts.size(), 0);
  auto got = asked->ForwardBatch(pa, rows, starts, from);
  auto want = whole->ForwardBatch(pw, rows, starts);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_TRUE(want.ok()) << want.status();
  for (size_t i = 0; i < prompts.size(); ++i) {
    const int64_t n = static_cast<int64_t>(prompts[i].size());
    ASSERT_EQ((*got)[i].size(), static_cast<size_t>((n - from[i]) * v)) << "row " << i;
    EXPECT_TRUE(std::equal((*got)[i].begin(), (*got)[i].end(), (*want)[i].begin() + from[i] * v))
        << "row " << i;
    EXPECT_EQ(sa[i]->length(), n);
  }
  // The next step (one token each) is the same with and without.
  const std::vector<std::vector<int64_t>> next = {{3}, {4}, {5}, {6}};
  std::vector<std::span<const int64_t>> next_rows(next.begin(), next.end());
  std::vector<int64_t> next_starts;
  for (const auto& p : prompts) next_starts.push_back(static_cast<int64_t>(p.size()));
  auto got2 = asked->ForwardBatch(pa, next_rows, next_starts);
  auto want2 = whole->ForwardBatch(pw, next_rows, next_starts);
  ASSERT_TRUE(got2.ok() && want2.ok());
  EXPECT_EQ(*got2, *want2);
  // Refused, nothing changed: an entry past the row, a negative one, a count
  // that is not the row count.
  for (const std::vector<int64_t>& bad :
       {std::vector<int64_t>{0, 0, 0, 2}, std::vector<int64_t>{-1, 0, 0, 0},
        std::vector<int64_t>{0, 0}}) {
    EXPECT_EQ(asked->ForwardBatch(pa, next_rows, next_starts, bad).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(sa[i]->length(), static_cast<int64_t>(prompts[i].size()) + 1);
  }
}

TEST(ModelBatchTest, EmptyBatchIsANoOp) {
  auto model = NewModel();
  ASSERT_NE(model, nullptr);
  auto got = model->ForwardBatch({}, {}, {});
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(got->empty());
}

TEST(ModelBatchTest, BadRowsChangeNothing) {
  auto model = NewModel();
  ASSERT_NE(model, nullptr);
  auto s0 = model->NewSequence(), s1 = model->NewSequence();
  const std::vector<int64_t> ok = Tokens(4, 7), bad = {1, 4096};
  const int64_t zero[] = {0, 0};
  {
    SequenceState* states[] = {s0.get(), s1.get()};
    const std::span<const int64_t> rows[] = {ok, bad};
    EXPECT_EQ(model->ForwardBatch(states, rows, zero).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
  {
    SequenceState* states[] = {s0.get(), s0.get()};  // repeated state
    const std::span<const int64_t> rows[] = {ok, ok};
    EXPECT_EQ(model->ForwardBatch(states, rows, zero).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
  {
    SequenceState* states[] = {s0.get(), s1.get()};
    const std::span<const int64_t> rows[] = {ok, ok};
    const int64_t starts[] = {0, 3};  // start_pos != length
    EXPECT_EQ(model->ForwardBatch(states, rows, starts).status().code(),
              absl::StatusCode::kInvalidArgument);
    const std::span<const int64_t> one[] = {ok};
    EXPECT_EQ(model->ForwardBatch(states, one, zero).status().code(),
              absl::StatusCode::kInvalidArgument);  // size mismatch
  }
  EXPECT_EQ(s0->length(), 0);
  EXPECT_EQ(s1->length(), 0);
  EXPECT_TRUE(s0->engram_history().empty());
  SequenceState* states[] = {s0.get(), s1.get()};
  const std::span<const int64_t> rows[] = {ok, ok};
  auto got = model->ForwardBatch(states, rows, zero);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ((*got)[0], (*got)[1]);
}

}  // namespace
}  // namespace weir::model
