// How far CED bounded replay (spec §4.4, Model::StartCedReplay) moves the
// outputs of the trained tiny (models/tiny: window 8, decoder layers 6-11,
// not trained with replay), measured on the 16 held-out texts of
// tests/golden/tiny_trained: for prompts of their first 64, 128 and 256
// tokens, greedy continuations of 32 tokens with replay on and off (bf16
// activations, as served), and the top-1 agreement of the replayed prompt
// rows. Prints the table of worker/model/README.md ("CED bounded replay") and
// holds the measured agreement as a floor, so a change that makes replay
// worse fails. Manual: about four minutes on the 2-core development machine.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <span>
#include <vector>

#include "gtest/gtest.h"
#include "worker/model/checkpoint.h"
#include "worker/model/golden_file.h"
#include "worker/model/model.h"
#include "worker/model/tiny_model_test_util.h"

namespace weir::model {
namespace {

constexpr char kGolden[] = "tests/golden/tiny_trained/ref_fp32.safetensors";
constexpr int kSteps = 32;

std::unique_ptr<Model> TrainedModel() {
  const Checkpoint* checkpoint = TrainedTinyCheckpoint();
  if (checkpoint == nullptr) return nullptr;
  ModelOptions options;
  options.engram_token_map = TrainedTinyEngramMap();
  if (options.engram_token_map.empty()) return nullptr;
  return NewModelOrFail(*checkpoint, std::move(options));
}

struct Outcome {
  std::vector<int64_t> tokens;       // greedy continuation
  std::vector<int64_t> prompt_top1;  // argmax of the last window prompt rows
};

Outcome Greedy(Model& m, std::span<const int64_t> prompt, bool replay) {
  const int64_t v = m.config().vocab_size, win = m.config().window_size;
  const int64_t n = static_cast<int64_t>(prompt.size());
  Outcome out;
  auto seq = m.NewSequence();
  if (replay) {
    EXPECT_TRUE(m.StartCedReplay(*seq, n).ok());
  }
  auto logits = m.Forward(*seq, prompt, 0);
  EXPECT_TRUE(logits.ok()) << logits.status();
  if (!logits.ok()) return out;
  for (int64_t r = n - win; r < n; ++r)
    out.prompt_top1.push_back(ArgmaxRow(logits->data() + r * v, v));
  std::vector<float> last(logits->end() - v, logits->end());
  for (int i = 0; i < kSteps; ++i) {
    const int64_t next[1] = {ArgmaxRow(last.data(), v)};
    out.tokens.push_back(next[0]);
    logits = m.Forward(*seq, next, seq->length());
    EXPECT_TRUE(logits.ok()) << logits.status();
    if (!logits.ok()) return out;
    last = *logits;
  }
  return out;
}

TEST(CedReplayAgreementTest, TrainedTinyGreedyOnVsOff) {
  Golden g(kGolden);
  ASSERT_TRUE(g.ok());
  std::unique_ptr<Model> model = TrainedModel();
  ASSERT_NE(model, nullptr);
  const std::vector<int32_t> tokens = g.Get<int32_t>("tf.tokens");
  const std::vector<int32_t> offsets = g.Get<int32_t>("tf.offsets");
  const int texts = static_cast<int>(offsets.size()) - 1;
  ASSERT_EQ(texts, 16);
  std::printf("prompt  first token  all %d identical  mean common prefix  replayed rows top-1\n",
              kSteps);
  for (const int len : {64, 128, 256}) {
    int first = 0, all = 0, rows_same = 0, rows = 0;
    double prefix = 0;
    for (int p = 0; p < texts; ++p) {
      ASSERT_GE(offsets[p + 1] - offsets[p], len);
      const std::vector<int64_t> prompt(tokens.begin() + offsets[p],
                                        tokens.begin() + offsets[p] + len);
      const Outcome exact = Greedy(*model, prompt, false);
      const Outcome replay = Greedy(*model, prompt, true);
      ASSERT_EQ(exact.tokens.size(), size_t{kSteps});
      ASSERT_EQ(replay.tokens.size(), size_t{kSteps});
      if (p == 0) {  // deterministic
        const Outcome again = Greedy(*model, prompt, true);
        EXPECT_EQ(again.tokens, replay.tokens);
        EXPECT_EQ(again.prompt_top1, replay.prompt_top1);
      }
      first += exact.tokens[0] == replay.tokens[0];
      all += exact.tokens == replay.tokens;
      const auto diverge =
          std::mismatch(exact.tokens.begin(), exact.tokens.end(), replay.tokens.begin());
      prefix += static_cast<double>(diverge.first - exact.tokens.begin());
      for (size_t r = 0; r < exact.prompt_top1.size(); ++r) {
        rows_same += exact.prompt_top1[r] == replay.prompt_top1[r];
        ++rows;
      }
    }
    std::printf("%6d  %7d / %d  %12d / %d  %18.1f  %12d / %d (%.1f%%)\n", len, first, texts, all,
                texts, prefix / texts, rows_same, rows, 100.0 * rows_same / rows);
    // Floors below the measured agreement (worker/model/README.md: 14-16 of
    // 16 first tokens, 79-87% of the replayed rows).
    EXPECT_GE(first, 12) << "prompt " << len;
    EXPECT_GE(rows_same * 10, rows * 7) << "prompt " << len;
  }
}

}  // namespace
}  // namespace weir::model
