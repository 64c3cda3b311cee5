// CED bounded replay in the step executor (StepExecutor::SetCedReplay): a
// sequence started by a plan replays the decoder over the last window
// positions of its prompt, whose length is output_from (or the row's input),
// whatever the prompt's chunks; exact_prefill and prompt_logprobs rows
// prefill exactly; a model that cannot replay is refused.
#include <algorithm>
#include <cmath>
#include <span>
#include <vector>

#include "gtest/gtest.h"
#include "worker/step_executor.h"
#include "worker/step_executor_test_util.h"

namespace weir::worker {
namespace {

RowPlan Row(int32_t slot, int64_t start, std::vector<int64_t> tokens, bool sample) {
  RowPlan row{.slot = slot,
              .start_pos = start,
              .tokens = std::move(tokens),
              .sample = sample,
              .return_top_k = 1};
  row.sampling.temperature = 0.0f;
  return row;
}

// The model's own greedy continuation (`steps` tokens) and the prefill's last
// logits, with or without replay.
struct Direct {
  std::vector<int32_t> tokens;
  std::vector<float> last;
};
Direct RunDirect(model::Model& m, const std::vector<int64_t>& prompt, bool replay, int steps) {
  const int64_t v = m.config().vocab_size;
  Direct d;
  auto seq = m.NewSequence();
  if (replay) {
    EXPECT_TRUE(m.StartCedReplay(*seq, static_cast<int64_t>(prompt.size())).ok());
  }
  auto logits = m.Forward(*seq, prompt, 0);
  EXPECT_TRUE(logits.ok()) << logits.status();
  if (!logits.ok()) return d;
  d.last.assign(logits->end() - v, logits->end());
  std::vector<float> last = d.last;
  for (int i = 0; i < steps; ++i) {
    const int64_t next[1] = {model::ArgmaxRow(last.data(), v)};
    d.tokens.push_back(static_cast<int32_t>(next[0]));
    logits = m.Forward(*seq, next, seq->length());
    EXPECT_TRUE(logits.ok()) << logits.status();
    if (!logits.ok()) return d;
    last = *logits;
  }
  return d;
}

TEST(StepExecutorCedTest, ChunkedPromptsReplayAsTheModelDoes) {
  TinyModelFixture f(/*seed=*/5);
  ASSERT_NE(f.model, nullptr);
  const int64_t v = f.model->config().vocab_size;
  const std::vector<int64_t> prompt = model::RandomTokens(30, 41);  // replay start 22
  constexpr int kSteps = 6;
  const Direct replay = RunDirect(*f.model, prompt, true, kSteps);
  const Direct exact = RunDirect(*f.model, prompt, false, kSteps);
  // The test tells replay from exact.
  ASSERT_GT(model::RowRelativeDifference(replay.last.data(), exact.last.data(), v), 1e-3);

  StepExecutor executor(*f.model, 4);
  ASSERT_TRUE(executor.SetCedReplay(true).ok());
  EXPECT_TRUE(executor.ced_replay());
  // Slot 0: chunks 12 + 18 (the prompt's length from output_from); slot 1:
  // one chunk (its input is the prompt); slot 2: exact_prefill; slot 3:
  // prompt logprobs, exact too.
  RowPlan first = Row(0, 0, {prompt.begin(), prompt.begin() + 12}, false);
  first.output_from = 30;
  RowPlan whole = Row(1, 0, prompt, true);
  RowPlan exact_row = Row(2, 0, prompt, true);
  exact_row.exact_prefill = true;
  RowPlan scored = Row(3, 0, prompt, true);
  scored.prompt_logprobs = 0;
  scored.prompt_end = 30;
  auto step0 = executor.Execute({first, whole, exact_row, scored}, {});
  ASSERT_TRUE(step0.ok()) << step0.status();
  auto step1 = executor.Execute({Row(0, 12, {prompt.begin() + 12, prompt.end()}, true)}, {});
  ASSERT_TRUE(step1.ok()) << step1.status();
  const RowOutcome* prefilled[4] = {&(*step1)[0], &(*step0)[1], &(*step0)[2], &(*step0)[3]};
  const Direct* want[4] = {&replay, &replay, &exact, &exact};
  std::vector<std::vector<int32_t>> got(4);
  for (int s = 0; s < 4; ++s) {
    ASSERT_TRUE(prefilled[s]->status.ok()) << prefilled[s]->status;
    ASSERT_TRUE(prefilled[s]->token.has_value());
    got[s].push_back(*prefilled[s]->token);
    ASSERT_EQ(prefilled[s]->top_logits.size(), 1u);
    const float best = *std::max_element(want[s]->last.begin(), want[s]->last.end());
    EXPECT_NEAR(prefilled[s]->top_logits[0], best, 1e-4 * std::max(1.0f, std::fabs(best)))
        << "slot " << s;
  }
  EXPECT_EQ((*step0)[3].prompt_logprobs.size(), 29u);  // positions 1..29 scored
  // Decode with remap rows (zero-overhead), every slot in one plan.
  for (int i = 1; i < kSteps; ++i) {
    std::vector<RowPlan> rows;
    for (int32_t s = 0; s < 4; ++s) {
      rows.push_back(Row(s, 30 + i - 1, {got[s].back()}, true));
    }
    auto step = executor.Execute(rows, {});
    ASSERT_TRUE(step.ok()) << step.status();
    for (int s = 0; s < 4; ++s) {
      ASSERT_TRUE((*step)[s].token.has_value());
      got[s].push_back(*(*step)[s].token);
    }
  }
  for (int s = 0; s < 4; ++s) EXPECT_EQ(got[s], want[s]->tokens) << "slot " << s;
}

TEST(StepExecutorCedTest, ModelsThatCannotReplayAreRefused) {
  const model::Checkpoint* ckpt = model::DerivedCheckpoint(
      "random/tiny", "random_tiny_kv8_seed5",
      {{"\"kv_source_layer_ids\": [2, 4, 6]", "\"kv_source_layer_ids\": [2, 4, 6, 8]"},
       {"\"candidate_source_layer_id\": 6", "\"candidate_source_layer_id\": -1"}},
      5);
  ASSERT_NE(ckpt, nullptr);
  auto m = model::NewModelOrFail(*ckpt);
  ASSERT_NE(m, nullptr);
  StepExecutor executor(*m, 1);
  EXPECT_EQ(executor.SetCedReplay(true).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(executor.ced_replay());
  EXPECT_TRUE(executor.SetCedReplay(false).ok());
}

}  // namespace
}  // namespace weir::worker
