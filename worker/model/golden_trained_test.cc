// The CPU forward on the trained tiny (models/tiny) against the official V4.1
// reference run on the same checkpoint (tests/golden/README.md, "Trained
// tiny": prompts, runs, tolerances and why). fp32 activations on both sides.
//
// * Greedy: each prompt as one prefill chunk, then 256 decode steps feeding
//   weir's own argmax; the 257 ids must equal the reference's on at least 15
//   of the 16 prompts.
// * Teacher forcing: prompt + the next 256 held-out tokens as one chunk; the
//   argmax of every row must equal the reference's on at least 99.5% of rows.
// * Logits: the first 48 teacher-forced rows of prompt 0 within golden_test's
//   bound (max |d| / max |ref| < 1e-3 per row).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tokenizer/engram_vocab.h"
#include "tokenizer/tokenizer.h"
#include "worker/model/checkpoint.h"
#include "worker/model/golden_file.h"
#include "worker/model/model.h"
#include "worker/model/safetensors.h"

namespace weir::model {
namespace {

constexpr char kModelDir[] = "models/tiny";
constexpr char kGolden[] = "tests/golden/tiny_trained/ref_fp32.safetensors";
constexpr int kPrompts = 16;
constexpr int kGreedyIds = 257;        // the prefill's argmax + 256 decode steps
constexpr int kMinGreedyPrompts = 15;  // of 16
constexpr double kMinTeacherForcedTop1 = 0.995;
constexpr int kLogitRows = 48;
constexpr double kLogitTol = 1e-3;  // golden_test's bound (tests/golden/README.md)

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

double RelDiff(const float* a, const float* b, int64_t n) {
  double diff = 0, scale = 1e-30;
  for (int64_t i = 0; i < n; ++i) {
    diff = std::max(diff, double{std::fabs(a[i] - b[i])});
    scale = std::max(scale, double{std::fabs(b[i])});
  }
  return diff / scale;
}

// The trained checkpoint with its tokenizer's Engram map, fp32 activations;
// built once per test binary.
Model* TrainedModel() {
  static Model* model = []() -> Model* {
    static std::unique_ptr<Checkpoint> checkpoint;
    auto c = Checkpoint::Open(kModelDir);
    EXPECT_TRUE(c.ok()) << c.status();
    if (!c.ok()) return nullptr;
    checkpoint = std::move(*c);
    ModelOptions options;
    options.precision = ActivationPrecision::kFp32;
    auto tok = tokenizer::Tokenizer::FromDirectory(kModelDir);
    EXPECT_TRUE(tok.ok()) << tok.status();
    if (!tok.ok()) return nullptr;
    auto engram = tokenizer::BuildEngramVocab(**tok);
    EXPECT_TRUE(engram.ok()) << engram.status();
    if (!engram.ok()) return nullptr;
    EXPECT_EQ(engram->size, checkpoint->config().engram_compressed_vocab_size);
    options.engram_token_map.assign(engram->compressed_id.begin(), engram->compressed_id.end());
    auto m = Model::Create(checkpoint->config(), *checkpoint, std::move(options));
    EXPECT_TRUE(m.ok()) << m.status();
    return m.ok() ? m->release() : nullptr;
  }();
  return model;
}

TEST(GoldenTrainedTest, GreedyDecodingMatchesTheReference) {
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
  int agreeing = 0;
  for (int p = 0; p < kPrompts; ++p) {
    const std::vector<int64_t> prompt(tokens.begin() + offsets[p],
                                      tokens.begin() + offsets[p] + prompt_lens[p]);
    auto seq = model.NewSequence();
    auto logits = model.Forward(*seq, prompt, 0);
    ASSERT_TRUE(logits.ok()) << logits.status();
    Top2 top = Best(logits->data() + (prompt_lens[p] - 1) * v, v);
    int step = 0;  // index into the 257 ids
    for (;;) {
      if (top.id != ref_ids[p * kGreedyIds + step] || step + 1 == kGreedyIds) break;
      const int64_t pos = prompt_lens[p] + step;
      const int64_t next[1] = {top.id};
      logits = model.Forward(*seq, next, pos);
      ASSERT_TRUE(logits.ok()) << logits.status();
      top = Best(logits->data(), v);
      ++step;
    }
    const bool agrees = top.id == ref_ids[p * kGreedyIds + step];
    agreeing += agrees;
    if (agrees) {
      std::printf("prompt %2d (%2d tokens): 256 decode steps identical\n", p, prompt_lens[p]);
    } else {
      std::printf(
          "prompt %2d (%2d tokens): parts at id %d (decode step %d): weir %lld "
          "(margin %.3g), reference %d (margin %.3g)\n",
          p, prompt_lens[p], step, step - 1, static_cast<long long>(top.id), top.margin,
          ref_ids[p * kGreedyIds + step], ref_margin[p * kGreedyIds + step]);
    }
  }
  std::printf("greedy: %d of %d prompts identical over 256 decode steps\n", agreeing, kPrompts);
  EXPECT_GE(agreeing, kMinGreedyPrompts);
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
  double worst = 0;
  int worst_row = -1, first_over = -1;
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
      } else if (first_different < 0) {
        first_different = r;
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
        const double d = RelDiff(logits->data() + r * v, ref_logits.data() + r * v, v);
        if (d > worst) {
          worst = d;
          worst_row = r;
        }
        if (d >= kLogitTol && first_over < 0) first_over = r;
      }
    }
  }
  const double rate = static_cast<double>(equal) / static_cast<double>(rows);
  std::printf(
      "teacher forcing: %lld of %lld rows with the reference's argmax (%.4f); prompt 0 "
      "rows 0-%d: max relative logit error %.3g (row %d)\n",
      static_cast<long long>(equal), static_cast<long long>(rows), rate, kLogitRows - 1, worst,
      worst_row);
  EXPECT_GE(rate, kMinTeacherForcedTop1);
  EXPECT_LT(worst, kLogitTol) << "prompt 0: rows from " << first_over << " over the bound";
}

}  // namespace
}  // namespace weir::model
