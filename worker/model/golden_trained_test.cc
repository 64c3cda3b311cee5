// The CPU forward on the trained tiny (models/tiny) against the official V4.1
// reference run on the same checkpoint (tests/golden/README.md, "Trained
// tiny": prompts, runs, tolerances and why). fp32 activations on both sides.
//
// Issue 19 asked for 15 of 16 greedy runs identical over 256 steps, 99.5%
// teacher-forced top-1 and logits within 1e-3. Two implementations that
// differ only in fp32 summation order cannot meet that on this model: a
// quantizer input one ulp from an e4m3 midpoint rounds either way, and the
// reference run against itself in another order agrees on 3 of 16 greedy
// runs and 97.3% of rows. Those numbers are printed; what is asserted is
// what a wrong operation breaks and a rounding flip does not:
// * Decode: each prompt prefilled, then 256 decode steps fed the reference's
//   greedy ids; each step's argmax against the reference's next id
//   (>= 96%). A prompt with no mismatch is one whose own greedy run equals
//   the reference's (the issue's count).
// * Teacher forcing: prompt + the next 256 held-out tokens as one chunk;
//   every row's argmax (>= 96%).
// * Logits: the first 48 teacher-forced rows of prompt 0: median relative
//   difference <= 1e-5, every row <= 1e-2 (a flip moves the rows of one
//   window by 0.2-0.5%; rows before it agree to ~1e-6).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "worker/model/checkpoint.h"
#include "worker/model/golden_file.h"
#include "worker/model/model.h"
#include "worker/model/safetensors.h"
#include "worker/model/tiny_model_test_util.h"

namespace weir::model {
namespace {

constexpr char kGolden[] = "tests/golden/tiny_trained/ref_fp32.safetensors";
constexpr int kPrompts = 16;
constexpr int kGreedyIds = 257;        // the prefill's argmax + 256 decode steps
constexpr int kIssueGreedyPrompts = 15;  // of 16: issue 19's criterion, reported
constexpr double kIssueTop1 = 0.995;     // issue 19's teacher-forced criterion, reported
constexpr double kIssueLogitTol = 1e-3;  // golden_test's bound, reported
// What is asserted (tests/golden/README.md, "Trained tiny": why): top-1
// agreement of prefill rows and of decode steps on the reference's history
// >= 96% (the reference against itself in another summation order: 97.3%;
// a wrong operation leaves a fraction of that); prompt 0's first 48 logit
// rows: median <= 1e-5 (rows before any rounding flip agree to ~1e-6) and
// every row <= 1e-2 (a flip moves a row by 0.2-0.5% for a window's rows).
constexpr double kMinTop1 = 0.96;
constexpr double kMaxMedianLogitDiff = 1e-5;
constexpr double kMaxLogitDiff = 1e-2;
constexpr int kLogitRows = 48;

struct Top2 {
  int64_t id;
  float margin;  // best - second best
};

Top2 Best(const float* row, int64_t n) {
  const int64_t best = std::max_element(row, row + n) - row;
  float second = -INFINITY;
  for (int64_t i = 0; i < n; ++i) {
    if (i != best) second = std::max(second, row[i]);
  }
  return {best, row[best] - second};
}

// The trained checkpoint with its tokenizer's Engram map, fp32 activations;
// built once per test binary.
Model* TrainedModel() {
  static Model* model = []() -> Model* {
    const Checkpoint* checkpoint = TrainedTinyCheckpoint();
    if (checkpoint == nullptr) return nullptr;
    ModelOptions options;
    options.precision = ActivationPrecision::kFp32;
    options.engram_token_map = TrainedTinyEngramMap();
    if (options.engram_token_map.empty()) return nullptr;
    return NewModelOrFail(*checkpoint, std::move(options)).release();
  }();
  return model;
}

TEST(GoldenTrainedTest, DecodeStepsMatchTheReference) {
  Golden g(kGolden);
  ASSERT_TRUE(g.ok());
  Model* model_ptr = TrainedModel();
  ASSERT_NE(model_ptr, nullptr);
  Model& model = *model_ptr;
  const int64_t v = model.config().vocab_size;
  const std::vector<int32_t> prompt_lens = g.Get<int32_t>("prompt_lens");
  const std::vector<int32_t> tokens = g.Get<int32_t>("tf.tokens");
  const std::vector<int32_t> offsets = g.Get<int32_t>("tf.offsets");
  const std::vector<int32_t> ref_ids = g.Get<int32_t>("greedy.ids");
  const std::vector<float> ref_margin = g.Get<float>("greedy.margin");
  ASSERT_EQ(prompt_lens.size(), size_t{kPrompts});
  ASSERT_EQ(ref_ids.size(), size_t{kPrompts * kGreedyIds});
  // Every decode step is fed the reference's greedy id (teacher forcing on
  // its greedy run), so a prompt's steps are compared on one history even
  // after a mismatch; a prompt with no mismatch is one whose own greedy run
  // equals the reference's over all 256 steps (the issue's criterion).
  int identical_prompts = 0, equal_ids = 0;
  for (int p = 0; p < kPrompts; ++p) {
    const int32_t* ids = ref_ids.data() + p * kGreedyIds;
    const std::vector<int64_t> prompt(tokens.begin() + offsets[p],
                                      tokens.begin() + offsets[p] + prompt_lens[p]);
    auto seq = model.NewSequence();
    auto logits = model.Forward(*seq, prompt, 0);
    ASSERT_TRUE(logits.ok()) << logits.status();
    Top2 top = Best(logits->data() + (prompt_lens[p] - 1) * v, v);
    int equal = 0, first_different = -1;
    for (int step = 0;; ++step) {  // step: index into the 257 ids
      if (top.id == ids[step]) {
        ++equal;
      } else if (first_different < 0) {
        first_different = step;
        std::printf("prompt %2d (%2d tokens): parts at id %d: weir %lld (margin %.3g), "
                    "reference %d (margin %.3g)",
                    p, prompt_lens[p], step, static_cast<long long>(top.id), top.margin,
                    ids[step], ref_margin[p * kGreedyIds + step]);
      }
      if (step + 1 == kGreedyIds) break;
      const int64_t next[1] = {ids[step]};
      logits = model.Forward(*seq, next, prompt_lens[p] + step);
      ASSERT_TRUE(logits.ok()) << logits.status();
      top = Best(logits->data(), v);
    }
    if (first_different < 0) {
      std::printf("prompt %2d (%2d tokens): 256 decode steps identical", p, prompt_lens[p]);
    }
    std::printf("; %d of %d ids equal on the reference's history\n", equal, kGreedyIds);
    identical_prompts += first_different < 0;
    equal_ids += equal;
  }
  const double rate = static_cast<double>(equal_ids) / (kPrompts * kGreedyIds);
  std::printf("greedy: %d of %d prompts identical over 256 decode steps (issue 19 asks %d; the "
              "reference against itself: 3); decode steps on the reference's history: %d of "
              "%d ids equal (%.4f)\n",
              identical_prompts, kPrompts, kIssueGreedyPrompts, equal_ids,
              kPrompts * kGreedyIds, rate);
  EXPECT_GE(rate, kMinTop1);
}

TEST(GoldenTrainedTest, TeacherForcedArgmaxAndLogitsMatchTheReference) {
  Golden g(kGolden);
  ASSERT_TRUE(g.ok());
  Model* model_ptr = TrainedModel();
  ASSERT_NE(model_ptr, nullptr);
  Model& model = *model_ptr;
  const int64_t v = model.config().vocab_size;
  const std::vector<int32_t> tokens = g.Get<int32_t>("tf.tokens");
  const std::vector<int32_t> offsets = g.Get<int32_t>("tf.offsets");
  const std::vector<int32_t> ref_argmax = g.Get<int32_t>("tf.argmax");
  const std::vector<float> ref_margin = g.Get<float>("tf.margin");
  const std::vector<float> ref_logits = g.Get<float>("logits.prompt0");
  ASSERT_EQ(offsets.size(), size_t{kPrompts + 1});
  ASSERT_EQ(ref_logits.size(), size_t(kLogitRows * v));
  int64_t rows = 0, equal = 0;
  std::vector<float> mismatch_margins;  // the reference's, where the argmaxes differ
  std::vector<double> row_diffs;        // prompt 0's first rows
  for (int p = 0; p < kPrompts; ++p) {
    const std::vector<int64_t> seq_tokens(tokens.begin() + offsets[p],
                                          tokens.begin() + offsets[p + 1]);
    auto seq = model.NewSequence();
    auto logits = model.Forward(*seq, seq_tokens, 0);
    ASSERT_TRUE(logits.ok()) << logits.status();
    const int64_t n = static_cast<int64_t>(seq_tokens.size());
    int64_t prompt_equal = 0, first_different = -1;
    for (int64_t r = 0; r < n; ++r) {
      const Top2 top = Best(logits->data() + r * v, v);
      if (top.id == ref_argmax[offsets[p] + r]) {
        ++prompt_equal;
      } else {
        if (first_different < 0) first_different = r;
        mismatch_margins.push_back(ref_margin[offsets[p] + r]);
      }
    }
    rows += n;
    equal += prompt_equal;
    std::printf("prompt %2d: %3lld of %3lld rows with the reference's argmax", p,
                static_cast<long long>(prompt_equal), static_cast<long long>(n));
    if (first_different >= 0) {
      std::printf("; first different row %lld (reference margin %.3g)",
                  static_cast<long long>(first_different),
                  ref_margin[offsets[p] + first_different]);
    }
    std::printf("\n");
    if (p == 0) {
      for (int r = 0; r < kLogitRows; ++r) {
        row_diffs.push_back(RowRelativeDifference(logits->data() + r * v, ref_logits.data() + r * v, v));
      }
    }
  }
  const double rate = static_cast<double>(equal) / static_cast<double>(rows);
  std::sort(mismatch_margins.begin(), mismatch_margins.end());
  std::vector<float> margins(ref_margin.begin(), ref_margin.end());
  std::sort(margins.begin(), margins.end());
  for (float t : {0.05f, 0.1f, 0.5f}) {
    const auto below = std::lower_bound(margins.begin(), margins.end(), t) - margins.begin();
    const auto mismatched =
        std::lower_bound(mismatch_margins.begin(), mismatch_margins.end(), t) -
        mismatch_margins.begin();
    std::printf("reference margin < %.2f: %.2f%% of the rows, %lld of the %zu mismatches\n", t,
                100.0 * below / margins.size(), static_cast<long long>(mismatched),
                mismatch_margins.size());
  }
  std::printf("prompt 0, relative logit difference of rows 0-%d:", kLogitRows - 1);
  for (double d : row_diffs) std::printf(" %.2g", d);
  std::printf("\n");
  const int over_issue_bound = static_cast<int>(
      std::count_if(row_diffs.begin(), row_diffs.end(), [](double d) { return d >= kIssueLogitTol; }));
  std::sort(row_diffs.begin(), row_diffs.end());
  std::printf(
      "teacher forcing: %lld of %lld rows with the reference's argmax (%.4f; issue 19 asks %.3f; "
      "the reference against itself: 0.9729); prompt 0 rows 0-%d: median relative logit "
      "difference %.3g, max %.3g, %d rows over issue 19's %.0e\n",
      static_cast<long long>(equal), static_cast<long long>(rows), rate, kIssueTop1,
      kLogitRows - 1, row_diffs[row_diffs.size() / 2], row_diffs.back(), over_issue_bound,
      kIssueLogitTol);
  EXPECT_GE(rate, kMinTop1);
  EXPECT_LE(row_diffs[row_diffs.size() / 2], kMaxMedianLogitDiff);
  EXPECT_LE(row_diffs.back(), kMaxLogitDiff);
}

}  // namespace
}  // namespace weir::model
