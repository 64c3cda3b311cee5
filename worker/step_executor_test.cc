#include "worker/step_executor.h"

#include <cstdlib>
#include <string>

#include "gtest/gtest.h"
#include "worker/model/tiny_checkpoint.h"

namespace weir::worker {
namespace {

struct Fixture {
  std::unique_ptr<model::Checkpoint> checkpoint;
  std::unique_ptr<model::Model> model;

  Fixture() {
    const std::string srcdir = std::getenv("TEST_SRCDIR");
    auto opened = model::GenerateAndOpenCheckpoint(srcdir + "/weir/models/tiny/config.json",
                                                   std::string(std::getenv("TEST_TMPDIR")) +
                                                       "/tiny",
                                                   /*seed=*/3);
    EXPECT_TRUE(opened.ok()) << opened.status();
    checkpoint = std::move(*opened);
    auto created = model::Model::Create(checkpoint->config(), *checkpoint);
    EXPECT_TRUE(created.ok()) << created.status();
    model = std::move(*created);
  }

  // Greedy next token of `tokens` run from scratch on the model directly.
  int32_t DirectGreedy(const std::vector<int64_t>& tokens) {
    auto seq = model->NewSequence();
    auto logits = model->Forward(*seq, tokens, 0);
    EXPECT_TRUE(logits.ok()) << logits.status();
    const int64_t vocab = model->config().vocab_size;
    const float* last = logits->data() + (tokens.size() - 1) * vocab;
    return static_cast<int32_t>(std::max_element(last, last + vocab) - last);
  }
};

RowPlan Greedy(int32_t slot, int64_t start, std::vector<int64_t> tokens, int32_t remap = -1) {
  RowPlan row{.slot = slot, .start_pos = start, .tokens = std::move(tokens), .remap = remap,
              .sample = true};
  row.sampling.temperature = 0.0f;
  return row;
}

TEST(StepExecutorTest, PrefillThenDecodeWithRemapMatchesTheModel) {
  Fixture f;
  StepExecutor executor(*f.model, 4);
  auto step0 = executor.Execute({Greedy(0, 0, {5, 6, 7, 8}), Greedy(1, 0, {9, 10})}, {});
  ASSERT_TRUE(step0.ok()) << step0.status();
  ASSERT_TRUE((*step0)[0].token.has_value());
  const int32_t a1 = *(*step0)[0].token, b1 = *(*step0)[1].token;
  EXPECT_EQ(a1, f.DirectGreedy({5, 6, 7, 8}));
  EXPECT_EQ(b1, f.DirectGreedy({9, 10}));

  // Row 0 takes its input from the previous step's sample (zero-overhead);
  // row 1 gets it explicitly. Both decode one position.
  auto step1 = executor.Execute({Greedy(0, 4, {}, /*remap=*/0), Greedy(1, 2, {b1})}, {});
  ASSERT_TRUE(step1.ok()) << step1.status();
  EXPECT_EQ(*(*step1)[0].token, f.DirectGreedy({5, 6, 7, 8, a1}));
  EXPECT_EQ(*(*step1)[1].token, f.DirectGreedy({9, 10, b1}));
  EXPECT_EQ(executor.used_slots(), 2);

  ASSERT_TRUE(executor.Execute({}, {0}).ok());
  EXPECT_EQ(executor.used_slots(), 1);

  // A plan that releases slot 1 and starts a new sequence in it: release first.
  auto reuse = executor.Execute({Greedy(1, 0, {5, 6, 7, 8})}, {1});
  ASSERT_TRUE(reuse.ok()) << reuse.status();
  EXPECT_EQ(*(*reuse)[0].token, a1);
  // Continuing the released sequence in the same plan is refused.
  EXPECT_FALSE(executor.Execute({Greedy(1, 4, {a1})}, {1}).ok());
  auto cont = executor.Execute({Greedy(1, 4, {a1})}, {});
  ASSERT_TRUE(cont.ok()) << cont.status();
}

TEST(StepExecutorTest, BadPlansAreRefusedWithoutSideEffects) {
  Fixture f;
  StepExecutor executor(*f.model, 2);
  ASSERT_TRUE(executor.Execute({Greedy(0, 0, {1, 2, 3})}, {}).ok());
  const int64_t vocab = f.model->config().vocab_size;
  const std::vector<std::vector<RowPlan>> bad = {
      {Greedy(2, 0, {1})},                      // slot out of range
      {Greedy(1, 0, {1}), Greedy(1, 0, {2})},   // slot twice
      {Greedy(0, 7, {1})},                      // position gap
      {Greedy(1, 0, {vocab})},                  // token outside the vocabulary
      {Greedy(1, 0, {-1})},                     // negative token
      {Greedy(0, 3, {}, /*remap=*/5)},          // remap to a row that does not exist
      {Greedy(1, 0, {})},                       // no input
  };
  for (size_t i = 0; i < bad.size(); ++i) {
    auto result = executor.Execute(bad[i], {});
    EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument) << i;
  }
  RowPlan hot = Greedy(1, 0, {1});
  hot.sampling.temperature = -2.0f;
  EXPECT_EQ(executor.Execute({hot}, {}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(executor.Execute({}, {9}).status().code(), absl::StatusCode::kInvalidArgument);
  // Nothing changed: slot 0 still continues at position 3.
  auto next = executor.Execute({Greedy(0, 3, {4})}, {});
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(*(*next)[0].token, f.DirectGreedy({1, 2, 3, 4}));
}

TEST(StepExecutorTest, SeededSamplingIgnoresBatchComposition) {
  Fixture f;
  RowPlan row{.slot = 0, .start_pos = 0, .tokens = {11, 12, 13}, .sample = true};
  row.sampling.temperature = 1.0f;
  row.sampling.seed = 1234;
  StepExecutor alone(*f.model, 4);
  auto a = alone.Execute({row}, {});
  ASSERT_TRUE(a.ok());
  StepExecutor crowd(*f.model, 4);
  RowPlan other = Greedy(1, 0, {40, 41});
  RowPlan moved = row;
  moved.slot = 3;
  auto b = crowd.Execute({other, moved, Greedy(2, 0, {7})}, {});
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(*(*a)[0].token, *(*b)[1].token);
}

TEST(StepExecutorTest, RecomputeKeepsPenaltiesOnGeneratedTokens) {
  Fixture f;
  // Strong negative penalties (rewarding repeats) make the next token depend
  // on which earlier tokens count as output.
  auto penalized = [](int32_t slot, int64_t start, std::vector<int64_t> tokens) {
    RowPlan row = Greedy(slot, start, std::move(tokens));
    row.sampling.frequency_penalty = -2.0f;
    row.sampling.presence_penalty = -2.0f;
    return row;
  };
  StepExecutor executor(*f.model, 4);
  std::vector<int64_t> history = {5, 6, 7};
  auto first = executor.Execute({penalized(0, 0, history)}, {});
  ASSERT_TRUE(first.ok());
  std::vector<int64_t> generated = {*(*first)[0].token};
  for (int step = 0; step < 4; ++step) {
    const int64_t pos = 3 + static_cast<int64_t>(generated.size()) - 1;
    auto next = executor.Execute({penalized(0, pos, {generated.back()})}, {});
    ASSERT_TRUE(next.ok()) << next.status();
    generated.push_back(*(*next)[0].token);
  }
  // Recompute after a preemption: prompt + all but the last generated token
  // as one prefill; the tokens past the prompt are marked as output.
  std::vector<int64_t> replay = history;
  replay.insert(replay.end(), generated.begin(), generated.end() - 1);
  RowPlan recompute = penalized(1, 0, replay);
  recompute.output_from = 3;
  auto again = executor.Execute({recompute}, {});
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(*(*again)[0].token, generated.back());
}

TEST(StepExecutorTest, TopKLogitsAreSortedAndNotSampledRowsStaySilent) {
  Fixture f;
  StepExecutor executor(*f.model, 1);
  RowPlan row{.slot = 0, .start_pos = 0, .tokens = {3, 4}, .sample = false, .return_top_k = 5};
  auto out = executor.Execute({row}, {});
  ASSERT_TRUE(out.ok());
  EXPECT_FALSE((*out)[0].token.has_value());
  ASSERT_EQ((*out)[0].top_ids.size(), 5u);
  for (int k = 1; k < 5; ++k) EXPECT_GE((*out)[0].top_logits[k - 1], (*out)[0].top_logits[k]);
  EXPECT_EQ((*out)[0].top_ids[0], f.DirectGreedy({3, 4}));
}

}  // namespace
}  // namespace weir::worker
