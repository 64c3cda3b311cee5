#include "worker/step_executor.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>

#include "gtest/gtest.h"
#include "worker/model/host_decode_backend.h"
#include "worker/sampling/sampler.h"
#include "worker/step_executor_test_util.h"

namespace weir::worker {
namespace {

struct Fixture : TinyModelFixture {
  Fixture() : TinyModelFixture(/*seed=*/3) {}

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
  EXPECT_EQ(FirstError(executor.Execute({Greedy(1, 4, {a1})}, {1})).code(),
            absl::StatusCode::kInvalidArgument);
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
    // The bad row answers INVALID_ARGUMENT; a good row of the same plan runs.
    auto result = executor.Execute(bad[i], {});
    ASSERT_TRUE(result.ok()) << i << ": " << result.status();
    EXPECT_EQ(FirstError(result).code(), absl::StatusCode::kInvalidArgument) << i;
    EXPECT_FALSE((*result).back().token.has_value()) << i;
  }
  RowPlan hot = Greedy(1, 0, {1});
  hot.sampling.temperature = -2.0f;
  EXPECT_EQ(FirstError(executor.Execute({hot}, {})).code(), absl::StatusCode::kInvalidArgument);
  // A release outside the slots is the plan's fault: refused whole.
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

// log_softmax(logits)[token] in double, and the token's rank (1 = most likely,
// ties to the lower id), straight from one position's logits [vocab].
double LogSoftmax(const float* logits, int64_t vocab, int32_t token) {
  double m = logits[0];
  for (int64_t i = 1; i < vocab; ++i) m = std::max<double>(m, logits[i]);
  double sum = 0.0;
  for (int64_t i = 0; i < vocab; ++i) sum += std::exp(logits[i] - m);
  return logits[token] - m - std::log(sum);
}

int32_t Rank(const float* logits, int64_t vocab, int32_t token) {
  int32_t rank = 1;
  for (int64_t i = 0; i < vocab; ++i) {
    rank += logits[i] > logits[token] || (logits[i] == logits[token] && i < token);
  }
  return rank;
}

// Every entry against the model's own forward of the whole prompt:
// `expected_logits` are the logits [vocab] that predict `entry.token`.
void ExpectScored(const TokenLogprob& entry, const float* expected_logits, int64_t vocab,
                  size_t k, const std::string& where) {
  EXPECT_NEAR(entry.logprob, LogSoftmax(expected_logits, vocab, entry.token), 1e-5) << where;
  EXPECT_EQ(entry.rank, Rank(expected_logits, vocab, entry.token)) << where;
  ASSERT_EQ(entry.top.size(), k) << where;
  for (size_t j = 0; j < k; ++j) {
    EXPECT_NEAR(entry.top[j].second, LogSoftmax(expected_logits, vocab, entry.top[j].first), 1e-5)
        << where;
    EXPECT_EQ(Rank(expected_logits, vocab, entry.top[j].first), static_cast<int32_t>(j + 1))
        << where;
  }
}

TEST(StepExecutorTest, PromptAndSampledLogprobsAreTheForwardsLogSoftmax) {
  Fixture f;
  const int64_t vocab = f.model->config().vocab_size;
  const std::vector<int64_t> prompt = {5, 6, 7, 8, 9, 10, 11};
  auto seq = f.model->NewSequence();
  auto direct = f.model->Forward(*seq, prompt, 0);
  ASSERT_TRUE(direct.ok()) << direct.status();
  const float* forward = direct->data();  // [prompt.size(), vocab]

  // The prompt in two chunks: position 3 is scored from the first chunk's
  // last logits, kept by the executor between the steps.
  StepExecutor executor(*f.model, 2);
  RowPlan first{.slot = 0, .start_pos = 0, .tokens = {5, 6, 7}, .prompt_logprobs = 5,
                .prompt_end = 7};
  RowPlan second = Greedy(0, 3, {8, 9, 10, 11});
  second.logprobs = 20;
  second.prompt_logprobs = 5;
  second.prompt_end = 7;
  // A row that asks for nothing gets nothing.
  RowPlan silent = Greedy(1, 0, {5, 6, 7});
  auto step0 = executor.Execute({first, silent}, {});
  ASSERT_TRUE(step0.ok()) << step0.status();
  auto step1 = executor.Execute({second}, {});
  ASSERT_TRUE(step1.ok()) << step1.status();
  const RowOutcome& a = (*step0)[0];
  const RowOutcome& b = (*step1)[0];
  EXPECT_TRUE((*step0)[1].prompt_logprobs.empty());
  EXPECT_FALSE((*step0)[1].sampled_logprobs.has_value());
  EXPECT_FALSE(a.sampled_logprobs.has_value());  // not a sampling row

  // Positions 1..6, each token scored by the logits of the position before.
  EXPECT_EQ(a.prompt_logprobs_from, 1);
  ASSERT_EQ(a.prompt_logprobs.size(), 2u);
  EXPECT_EQ(b.prompt_logprobs_from, 3);
  ASSERT_EQ(b.prompt_logprobs.size(), 4u);
  std::vector<TokenLogprob> all = a.prompt_logprobs;
  all.insert(all.end(), b.prompt_logprobs.begin(), b.prompt_logprobs.end());
  for (size_t p = 1; p < prompt.size(); ++p) {
    const TokenLogprob& entry = all[p - 1];
    EXPECT_EQ(entry.token, prompt[p]);
    ExpectScored(entry, forward + (p - 1) * vocab, vocab, 5, "position " + std::to_string(p));
  }

  // The sampled (greedy) token: rank 1, 20 alternatives, the first itself.
  ASSERT_TRUE(b.token.has_value());
  ASSERT_TRUE(b.sampled_logprobs.has_value());
  EXPECT_EQ(b.sampled_logprobs->token, *b.token);
  ExpectScored(*b.sampled_logprobs, forward + (prompt.size() - 1) * vocab, vocab, 20, "sampled");
  EXPECT_EQ(b.sampled_logprobs->rank, 1);
  EXPECT_EQ(b.sampled_logprobs->top[0].first, *b.token);

  // Out of range asks fail that row only.
  RowPlan too_many = Greedy(1, 0, {3});
  too_many.logprobs = static_cast<int32_t>(vocab) + 1;
  auto refused = executor.Execute({too_many}, {});
  ASSERT_TRUE(refused.ok());
  EXPECT_EQ((*refused)[0].status.code(), absl::StatusCode::kInvalidArgument);
}

RowPlan Seeded(int32_t slot, int64_t start, std::vector<int64_t> tokens, uint64_t seed) {
  RowPlan row{.slot = slot, .start_pos = start, .tokens = std::move(tokens), .sample = true};
  row.sampling.temperature = 1.0f;
  row.sampling.seed = seed;
  row.logprobs = 0;  // the sampler's logprob too (compared below)
  return row;
}

TEST(StepExecutorTest, AForkSamplesLikeItsOwnPrefill) {
  Fixture f;
  // Parallel samples: slot 0 prefills all but the last prompt token; then
  // slots 1 and 2 fork it and every one forwards the last token and samples
  // with its own seed, in one step.
  StepExecutor forked(*f.model, 4);
  ASSERT_TRUE(FirstError(forked.Execute(
                  {RowPlan{.slot = 0, .start_pos = 0, .tokens = {5, 6, 7, 8}}}, {}))
                  .ok());
  RowPlan fork1 = Seeded(1, 4, {9}, 11);
  fork1.fork_from = 0;
  RowPlan fork2 = Seeded(2, 4, {9}, 12);
  fork2.fork_from = 0;
  auto step = forked.Execute({Seeded(0, 4, {9}, 10), fork1, fork2}, {});
  ASSERT_TRUE(FirstError(step).ok()) << FirstError(step);
  EXPECT_EQ(forked.used_slots(), 3);

  // Each equals a sequence prefilled on its own, here and one decode later.
  for (int i = 0; i < 3; ++i) {
    StepExecutor alone(*f.model, 1);
    auto first = alone.Execute({Seeded(0, 0, {5, 6, 7, 8, 9}, 10 + i)}, {});
    ASSERT_TRUE(FirstError(first).ok());
    EXPECT_EQ((*first)[0].token, (*step)[i].token) << "sample " << i;
    EXPECT_EQ(std::memcmp(&(*first)[0].logprob, &(*step)[i].logprob, sizeof(float)), 0);
    auto next = alone.Execute({Seeded(0, 5, {*(*first)[0].token}, 10 + i)}, {});
    ASSERT_TRUE(FirstError(next).ok());
    auto forked_next = forked.Execute({Seeded(i, 5, {*(*step)[i].token}, 10 + i)}, {});
    ASSERT_TRUE(FirstError(forked_next).ok());
    EXPECT_EQ((*next)[0].token, (*forked_next)[0].token) << "sample " << i;
  }

  // Bad forks fail alone: a source this plan releases or restarts, a
  // start_pos that is not the source's length, a fork of a fork.
  RowPlan wrong_pos = Seeded(3, 5, {9}, 1);
  wrong_pos.fork_from = 0;  // slot 0 holds 6 positions
  auto bad = forked.Execute({wrong_pos}, {});
  ASSERT_TRUE(bad.ok());
  EXPECT_EQ((*bad)[0].status.code(), absl::StatusCode::kInvalidArgument) << (*bad)[0].status;
  RowPlan of_released = Seeded(3, 6, {9}, 1);
  of_released.fork_from = 1;
  bad = forked.Execute({of_released}, {1});
  ASSERT_TRUE(bad.ok());
  EXPECT_EQ((*bad)[0].status.code(), absl::StatusCode::kInvalidArgument);
  RowPlan of_restarted = Seeded(3, 6, {9}, 1);
  of_restarted.fork_from = 2;
  bad = forked.Execute({Seeded(2, 0, {4}, 1), of_restarted}, {});
  ASSERT_TRUE(bad.ok());
  EXPECT_TRUE((*bad)[0].status.ok());
  EXPECT_EQ((*bad)[1].status.code(), absl::StatusCode::kInvalidArgument);
}

// --- With a DecodeBackend, on the CPU: HostDecodeBackend decodes with the
// model itself, so every outcome must equal the executor without a backend,
// through imports, batches larger than the backend's max_batch, an export for
// a row of several tokens, a release and a reused slot, and a seeded
// stochastic row. A failed backend step fails that step only: the slots it
// held are broken until released, other slots go on. (On a GPU machine
// step_executor_gpu_test runs the same plans against DeviceDecoder.)

RowPlan Row(int32_t slot, int64_t start, std::vector<int64_t> tokens, int32_t remap = -1) {
  RowPlan row{.slot = slot, .start_pos = start, .tokens = std::move(tokens), .remap = remap,
              .sample = true, .return_top_k = 4};
  row.sampling.temperature = 0.0f;
  row.logprobs = 0;  // the sampler's logprob too (ExpectSame compares it)
  return row;
}

void ExpectSame(const std::vector<RowOutcome>& a, const std::vector<RowOutcome>& b, int step) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].status, b[i].status) << "step " << step << " row " << i;
    if (!a[i].status.ok()) continue;
    EXPECT_EQ(a[i].token, b[i].token) << "step " << step << " row " << i;
    EXPECT_EQ(std::memcmp(&a[i].logprob, &b[i].logprob, sizeof(float)), 0);
    EXPECT_EQ(a[i].top_ids, b[i].top_ids);
    ASSERT_EQ(a[i].top_logits.size(), b[i].top_logits.size());
    EXPECT_EQ(std::memcmp(a[i].top_logits.data(), b[i].top_logits.data(),
                          a[i].top_logits.size() * sizeof(float)),
              0)
        << "step " << step << " row " << i;
  }
}

// Runs every plan on an executor without a backend and on one with it,
// expecting the same outcomes.
struct Twin {
  Twin(model::Model& model, int32_t slots, model::DecodeBackend* backend)
      : host(model, slots), dev(model, slots) {
    dev.SetDecodeBackend(backend);
  }
  void Both(const std::vector<RowPlan>& rows, const std::vector<int32_t>& release) {
    auto a = host.Execute(rows, release);
    auto b = dev.Execute(rows, release);
    ASSERT_TRUE(a.ok()) << a.status();
    ASSERT_TRUE(b.ok()) << b.status();
    ExpectSame(*a, *b, steps++);
  }
  StepExecutor host, dev;
  int steps = 0;
};

TEST(StepExecutorBackendTest, DecodeRowsOnTheBackendGiveTheModelsOutcomes) {
  Fixture f;
  model::HostDecodeBackend backend(*f.model, /*max_sequences=*/4, /*max_batch=*/2,
                                   /*max_positions=*/40);
  Twin twin(*f.model, 4, &backend);
  StepExecutor& dev = twin.dev;
  auto both = [&](const std::vector<RowPlan>& rows, const std::vector<int32_t>& release) {
    twin.Both(rows, release);
  };
  both({Row(0, 0, {5, 6, 7, 8, 9, 10}), Row(1, 0, {11, 12, 13}), Row(2, 0, {14})}, {});
  EXPECT_EQ(dev.device_rows(), 0);  // prefill stays on the model
  int64_t len[3] = {6, 3, 1};
  for (int s = 0; s < 5; ++s) {  // three decode rows, two backend steps each
    both({Row(0, len[0], {}, 0), Row(1, len[1], {}, 1), Row(2, len[2], {}, 2)}, {});
    for (int64_t& l : len) ++l;
  }
  EXPECT_EQ(dev.device_rows(), 15);
  EXPECT_EQ(backend.stats().imports, 3);
  EXPECT_EQ(backend.stats().steps, 10);
  // Three tokens on slot 2: its sequence comes back to the model first.
  both({Row(0, len[0], {}, 0), Row(1, len[1], {}, 1), Row(2, len[2], {21, 22, 23})}, {});
  len[0]++;
  len[1]++;
  len[2] += 3;
  EXPECT_EQ(backend.stats().exports, 1);
  EXPECT_FALSE(backend.holds(2));
  for (int s = 0; s < 3; ++s) {  // slot 2 is imported again
    both({Row(0, len[0], {}, 0), Row(1, len[1], {}, 1), Row(2, len[2], {}, 2)}, {});
    for (int64_t& l : len) ++l;
  }
  EXPECT_EQ(backend.stats().imports, 4);
  // Release slot 1, a new sequence there; a seeded stochastic row on slot 0.
  both({Row(1, 0, {30, 31, 32, 33})}, {1});
  EXPECT_FALSE(backend.holds(1));
  len[1] = 4;
  for (int s = 0; s < 4; ++s) {
    RowPlan r0 = Row(0, len[0], {}, s == 0 ? -1 : 0);
    if (s == 0) r0.tokens = {40};
    r0.sampling.temperature = 0.8f;
    r0.sampling.seed = 99;
    both({r0, Row(1, len[1], {}, s == 0 ? 0 : 1)}, {});
    ++len[0];
    ++len[1];
  }
  EXPECT_EQ(dev.device_rows(), 15 + 2 + 9 + 8);
}

// Greedy rows that read their logits for nothing else let the backend pick
// the tokens (StepRowsGreedy; a GPU copies back 4 bytes a row): the outcomes
// equal the host sampler's, and a step with any other row with logits (here
// one asking for logprobs, one sampled at a temperature) returns logits.
TEST(StepExecutorBackendTest, PlainGreedyRowsArePickedByTheBackend) {
  Fixture f;
  model::HostDecodeBackend backend(*f.model, /*max_sequences=*/4, /*max_batch=*/4,
                                   /*max_positions=*/40);
  Twin twin(*f.model, 4, &backend);
  auto greedy = [](int32_t slot, int64_t start, std::vector<int64_t> tokens, int32_t remap) {
    RowPlan row{.slot = slot,
                .start_pos = start,
                .tokens = std::move(tokens),
                .remap = remap,
                .sample = true};
    row.sampling.temperature = 0.0f;
    return row;
  };
  twin.Both({greedy(0, 0, {5, 6, 7}, -1), greedy(1, 0, {8, 9}, -1), greedy(2, 0, {10}, -1)}, {});
  int64_t len[3] = {3, 2, 1};
  for (int s = 0; s < 4; ++s) {
    twin.Both({greedy(0, len[0], {}, 0), greedy(1, len[1], {}, 1), greedy(2, len[2], {}, 2)}, {});
    for (int64_t& l : len) ++l;
  }
  EXPECT_EQ(backend.stats().greedy_steps, 4);
  EXPECT_EQ(twin.dev.device_rows(), 12);
  // One row wants its logprob: the step returns logits, the greedy rows
  // are sampled on the host as before.
  RowPlan with_logprob = greedy(1, len[1], {}, 1);
  with_logprob.logprobs = 0;
  twin.Both({greedy(0, len[0], {}, 0), with_logprob, greedy(2, len[2], {}, 2)}, {});
  for (int64_t& l : len) ++l;
  RowPlan sampled = greedy(2, len[2], {}, 2);
  sampled.sampling.temperature = 0.7f;
  sampled.sampling.seed = 5;
  twin.Both({greedy(0, len[0], {}, 0), greedy(1, len[1], {}, 1), sampled}, {});
  for (int64_t& l : len) ++l;
  EXPECT_EQ(backend.stats().greedy_steps, 4);
  twin.Both({greedy(0, len[0], {}, 0), greedy(1, len[1], {}, 1), greedy(2, len[2], {}, 2)}, {});
  EXPECT_EQ(backend.stats().greedy_steps, 5);
}

// DecodeBackend's default greedy pick: the first largest logit, NaN or +Inf
// anywhere, every logit -Inf.
TEST(StepExecutorBackendTest, TheDefaultGreedyPickFollowsTheSampler) {
  const float inf = std::numeric_limits<float>::infinity();
  using B = model::DecodeBackend;
  EXPECT_EQ(B::GreedyPick(std::vector<float>{1.0f, 3.0f, -2.0f, 3.0f}), 1);
  EXPECT_EQ(B::GreedyPick(std::vector<float>{-inf, -inf, 0.5f}), 2);
  EXPECT_EQ(B::GreedyPick(std::vector<float>{-inf, -inf}), B::kGreedyAllMasked);
  EXPECT_EQ(B::GreedyPick(std::vector<float>{2.0f, std::nanf(""), 1.0f}), B::kGreedyNonFinite);
  EXPECT_EQ(B::GreedyPick(std::vector<float>{2.0f, 1.0f, inf}), B::kGreedyNonFinite);
  // The sampler agrees on each (its statuses are what the executor reports).
  sampling::SamplingParams p;
  p.temperature = 0.0f;
  const std::vector<float> rows[] = {{1.0f, 3.0f, -2.0f, 3.0f}, {-inf, -inf}, {2.0f, 1.0f, inf}};
  for (const std::vector<float>& r : rows) {
    const sampling::SampleRow row{.logits = r.data(), .params = &p, .want_logprob = false};
    const sampling::SampleResult got =
        sampling::SampleBatch({row}, static_cast<int32_t>(r.size()))[0];
    const int32_t pick = B::GreedyPick(r);
    if (pick >= 0) {
      EXPECT_EQ(got.token, pick);
    } else {
      EXPECT_EQ(got.status, pick == B::kGreedyAllMasked ? sampling::EveryTokenMaskedError()
                                                        : sampling::NonFiniteLogitsError());
    }
  }
}

TEST(StepExecutorBackendTest, SlotsBeyondTheBackendStayOnTheModel) {
  Fixture f;
  model::HostDecodeBackend backend(*f.model, /*max_sequences=*/4, /*max_batch=*/4,
                                   /*max_positions=*/8);
  StepExecutor dev(*f.model, 6);
  dev.SetDecodeBackend(&backend);
  // Slot 5 is past the backend's slots; slot 0 reaches its position limit.
  ASSERT_TRUE(dev.Execute({Row(0, 0, {1, 2, 3, 4, 5, 6}), Row(5, 0, {7, 8})}, {}).ok());
  int64_t l0 = 6, l5 = 2;
  for (int s = 0; s < 4; ++s) {
    auto out = dev.Execute({Row(0, l0, {}, 0), Row(5, l5, {}, 1)}, {});
    ASSERT_TRUE(out.ok()) << out.status();
    ++l0;
    ++l5;
  }
  // Slot 0 decoded on the backend at positions 6 and 7, then came back for
  // position 8, past the backend's limit; slot 5 was never imported.
  EXPECT_EQ(backend.stats().imports, 1);
  EXPECT_EQ(backend.stats().exports, 1);
  EXPECT_EQ(dev.device_rows(), 2);
}

TEST(StepExecutorBackendTest, AFailedBackendStepBreaksOnlyItsSlots) {
  Fixture f;
  model::HostDecodeBackend backend(*f.model, 4, 4, 64);
  StepExecutor dev(*f.model, 4);
  dev.SetDecodeBackend(&backend);
  ASSERT_TRUE(
      dev.Execute({Row(0, 0, {1, 2, 3}), Row(1, 0, {4, 5}), Row(2, 0, {6, 7, 8, 9})}, {}).ok());
  ASSERT_TRUE(dev.Execute({Row(0, 3, {}, 0), Row(1, 2, {}, 1)}, {}).ok());
  backend.fail_next_step();
  auto failed = dev.Execute({Row(0, 4, {10}), Row(1, 3, {11})}, {});
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kInternal);
  EXPECT_FALSE(backend.holds(0));
  // Slot 2 was not in the failed step: it goes on.
  auto other = dev.Execute({Row(2, 4, {12})}, {});
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_TRUE((*other)[0].token.has_value());
  // Slot 0's sequence is gone (its host state is stale): refused, not wrong.
  EXPECT_FALSE(FirstError(dev.Execute({Row(0, 4, {10})}, {})).ok());
  // Released and restarted, it serves again.
  auto again = dev.Execute({Row(0, 0, {1, 2, 3})}, {0});
  ASSERT_TRUE(again.ok()) << again.status();
}


// --- A collective backend: two expert-parallel ranks (threads over a
// FakeCommunicator world), each an executor with a collective
// HostDecodeBackend over its rank's model, so every backend step is a
// collective of the group, as DeviceDecoder's is with an NCCL communicator of
// two GPUs. The ranks' plans differ (prefill on one while the other decodes,
// an empty plan, more decode rows than the backend's batch, an export, a
// refused plan on one rank): no collective may be left unpaired (a missing
// one times out), and every outcome equals a single-process executor's
// without a backend.
void CheckCollectiveBackend(int rows_per_slot) {
  Fixture f;
  constexpr int kWorld = 2;
  constexpr int kSteps = 10;
  // plans[r][s]: rank r's plan at step s.
  std::vector<std::vector<std::vector<RowPlan>>> plans(kWorld);
  {
    int64_t l0 = 6, l1 = 3, l2 = 1;
    plans[0].push_back({Row(0, 0, {5, 6, 7, 8, 9, 10}), Row(1, 0, {11, 12, 13}), Row(2, 0, {14})});
    for (int s = 1; s < kSteps; ++s) {
      if (s == 6) {  // three tokens on slot 1: exported from the backend first
        plans[0].push_back({Row(0, l0++, {}, 0), Row(1, l1, {21, 22, 23}), Row(2, l2++, {}, 2)});
        l1 += 3;
        continue;
      }
      plans[0].push_back({Row(0, l0++, {}, 0), Row(1, l1++, {}, 1), Row(2, l2++, {}, 2)});
    }
  }
  {
    int64_t l0 = 2, l1 = 3;
    plans[1].push_back({Row(0, 0, {30, 31})});
    plans[1].push_back({});                       // nothing to run on this rank
    plans[1].push_back({Row(0, l0++, {7})});      // (no sample to remap after an empty plan)
    plans[1].push_back({Row(0, l0++, {}, 0)});
    plans[1].push_back({Row(3, 5, {1})});         // refused: slot 3 holds nothing
    plans[1].push_back({Row(0, l0++, {9})});
    plans[1].push_back({Row(0, l0++, {}, 0), Row(1, 0, {40, 41, 42})});
    for (int s = 7; s < kSteps; ++s) {
      plans[1].push_back({Row(0, l0++, {}, 0), Row(1, l1++, {}, 1)});
    }
  }
  using Outcomes = absl::StatusOr<std::vector<RowOutcome>>;
  std::vector<std::vector<Outcomes>> got(kWorld);
  std::vector<model::HostDecodeBackendStats> backend_stats(kWorld);
  std::vector<int64_t> device_rows(kWorld);
  std::vector<absl::Status> st =
      OnExpertParallelRanks(*f.checkpoint, kWorld, [&](int r, model::Model& m) -> absl::Status {
        model::HostDecodeBackend backend(m, /*max_sequences=*/4,
                                         /*max_batch=*/rows_per_slot > 1 ? 6 : 2,
                                         /*max_positions=*/40, /*collective=*/true, rows_per_slot);
        StepExecutor executor(m, 4);
        executor.SetDecodeBackend(&backend);
        for (int s = 0; s < kSteps; ++s) got[r].push_back(executor.Execute(plans[r][s], {}));
        backend_stats[r] = backend.stats();
        device_rows[r] = executor.device_rows();
        return absl::OkStatus();
      });
  for (int r = 0; r < kWorld; ++r) ASSERT_TRUE(st[r].ok()) << "rank " << r << ": " << st[r];
  for (int r = 0; r < kWorld; ++r) {
    StepExecutor reference(*f.model, 4);
    for (int s = 0; s < kSteps; ++s) {
      Outcomes want = reference.Execute(plans[r][s], {});
      ASSERT_EQ(got[r][s].ok(), want.ok()) << "rank " << r << " step " << s << ": "
                                          << got[r][s].status() << " / " << want.status();
      if (!want.ok()) {
        EXPECT_EQ(got[r][s].status().code(), want.status().code());
        continue;
      }
      ExpectSame(*got[r][s], *want, s);
    }
  }
  for (int r = 0; r < kWorld; ++r) {
    for (int s = 0; s < kSteps; ++s) {
      if (r == 1 && s == 4) {  // its only row is refused; the rank still took the step
        EXPECT_EQ(FirstError(got[r][s]).code(), absl::StatusCode::kInvalidArgument);
      } else {
        EXPECT_TRUE(got[r][s].ok()) << "rank " << r << " step " << s << ": "
                                    << got[r][s].status();
      }
    }
  }
  // One collective backend step per plan on each rank, whatever it held.
  EXPECT_EQ(backend_stats[0].steps, kSteps);
  EXPECT_EQ(backend_stats[1].steps, kSteps);
  if (rows_per_slot > 1) {
    // Prefill chunks on the backend too (batch 6): rank 0's first plan puts
    // its 6 + 3 + 1 prompt positions partly there (whole rows only), and
    // nothing ever comes back to the model.
    EXPECT_GT(backend_stats[0].starts, 0);
    EXPECT_EQ(backend_stats[0].exports, 0);
    EXPECT_EQ(backend_stats[1].exports, 0);
    EXPECT_GT(device_rows[1], 10);
    return;
  }
  // Rank 0: two of its three decode rows per step on the backend (its batch),
  // the same two while they decode: one export (the three-token row), no
  // slot pushed out by a newcomer.
  EXPECT_EQ(device_rows[0], 2 * (kSteps - 1));
  EXPECT_EQ(backend_stats[0].exports, 1);
  // Rank 1: every decode row (7 steps on slot 0, 3 on slot 1).
  EXPECT_EQ(device_rows[1], 10);
  EXPECT_EQ(backend_stats[1].imports, 2);
}

TEST(StepExecutorBackendTest, CollectiveBackendKeepsExpertParallelRanksInStep) {
  CheckCollectiveBackend(1);
}
TEST(StepExecutorBackendTest, CollectiveBackendWithPrefillChunksKeepsRanksInStep) {
  CheckCollectiveBackend(4);
}

// A backend of several rows a slot (device-resident prefill): prompts start
// on it (Start) and run there in pieces of at most max_rows_per_slot, several
// backend steps a plan when a plan has more positions than its batch; a row
// of several tokens after decoding stays there; a chunk that neither samples
// nor returns logits asks for none. Every outcome equals the executor
// without a backend.
TEST(StepExecutorBackendTest, PrefillChunksOnTheBackendGiveTheModelsOutcomes) {
  Fixture f;
  model::HostDecodeBackend backend(*f.model, /*max_sequences=*/4, /*max_batch=*/8,
                                   /*max_positions=*/40, /*collective=*/false,
                                   /*max_rows_per_slot=*/5);
  Twin twin(*f.model, 5, &backend);
  StepExecutor &host = twin.host, &dev = twin.dev;
  auto both = [&](const std::vector<RowPlan>& rows, const std::vector<int32_t>& release) {
    twin.Both(rows, release);
  };
  RowPlan silent = Row(3, 0, {40, 41, 42, 43});  // a first chunk: no sample, no logits
  silent.sample = false;
  silent.return_top_k = 0;
  // 12 + 3 + 1 + 4 = 20 positions: three backend steps of at most 8.
  both({Row(0, 0, {5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}), Row(1, 0, {17, 18, 19}),
        Row(2, 0, {20}), silent},
       {});
  EXPECT_EQ(dev.device_rows(), 20);
  EXPECT_EQ(backend.stats().starts, 4);
  EXPECT_EQ(backend.stats().steps, 3);
  int64_t len[4] = {12, 3, 1, 4};
  both({Row(0, len[0], {}, 0), Row(1, len[1], {}, 1), Row(2, len[2], {}, 2),
        Row(3, len[3], {44, 45, 46, 47, 48, 49})},
       {});
  len[0]++, len[1]++, len[2]++, len[3] += 6;
  for (int s = 0; s < 4; ++s) {
    both({Row(0, len[0], {}, 0), Row(1, len[1], {}, 1), Row(2, len[2], {}, 2),
          Row(3, len[3], {}, 3)},
         {});
    for (int64_t& l : len) ++l;
  }
  // Three tokens after decoding: they run on the backend too.
  both({Row(0, len[0], {}, 0), Row(1, len[1], {50, 51, 52}), Row(2, len[2], {}, 2),
        Row(3, len[3], {}, 3)},
       {});
  len[0]++, len[1] += 3, len[2]++, len[3]++;
  EXPECT_EQ(backend.stats().exports, 0);
  EXPECT_EQ(backend.stats().imports, 0);
  // Slot 4 is past the backend's slots: its prompt runs on the model.
  both({Row(4, 0, {60, 61, 62}), Row(0, len[0], {}, 0)}, {});
  len[0]++;
  // Release slot 2, a new sequence there; a seeded stochastic row on slot 0.
  both({Row(2, 0, {30, 31, 32, 33, 34, 35, 36})}, {2});
  EXPECT_EQ(backend.stats().starts, 5);
  len[2] = 7;
  for (int s = 0; s < 3; ++s) {
    RowPlan r0 = Row(0, len[0], {}, s == 0 ? -1 : 0);
    if (s == 0) r0.tokens = {70};
    r0.sampling.temperature = 0.8f;
    r0.sampling.seed = 99;
    both({r0, Row(2, len[2], {}, s == 0 ? 0 : 1)}, {});
    ++len[0];
    ++len[2];
  }
  // A plan of two backend steps whose second fails: the row finished in the
  // first keeps its sequence; the row cut short is broken until restarted.
  backend.fail_step_after(1);
  std::vector<int64_t> long_prompt(12, 9);
  auto failed = dev.Execute({Row(0, len[0], {}, 0), Row(3, 0, long_prompt)}, {3});
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kInternal);
  EXPECT_TRUE(backend.holds(0));
  EXPECT_FALSE(backend.holds(3));
  EXPECT_FALSE(FirstError(dev.Execute({Row(3, 12, {1})}, {})).ok());
  ASSERT_TRUE(host.Execute({Row(0, len[0], {}, 0), Row(3, 0, long_prompt)}, {3}).ok());
  ++len[0];
  both({Row(0, len[0], {71})}, {});  // slot 0 goes on where the failed plan left it
  ++len[0];
  // Up to the backend's last position (40): a chunk that would pass it runs
  // on the model, its sequence exported first.
  const int64_t to_end = 40 - len[1];
  std::vector<int64_t> fill(to_end + 1, 3);
  both({Row(1, len[1], fill)}, {});
  EXPECT_EQ(backend.stats().exports, 1);
  EXPECT_FALSE(backend.holds(1));
}

// The backend learns which positions are a sequence's prompt
// (DecodeBackend::SetPromptEnd) before it steps them: a prompt's chunks are
// prompt positions however they fall, the positions after its first sample
// are output, and a recompute's prompt ends at its output_from. Outcomes are
// the model's throughout.
TEST(StepExecutorBackendTest, TheBackendKnowsEachPositionsRole) {
  Fixture f;
  model::HostDecodeBackend backend(*f.model, /*max_sequences=*/4, /*max_batch=*/8,
                                   /*max_positions=*/40, /*collective=*/false,
                                   /*max_rows_per_slot=*/5);
  Twin twin(*f.model, 4, &backend);
  StepExecutor& dev = twin.dev;
  RowPlan first = Row(0, 0, {40, 41, 42, 43, 44, 45, 46});  // 7 positions, two backend steps
  first.sample = false;
  first.return_top_k = 0;
  first.logprobs = -1;
  twin.Both({first}, {});
  EXPECT_EQ(dev.prompt_end(0), std::numeric_limits<int64_t>::max());
  EXPECT_EQ(backend.prompt_end(0), std::numeric_limits<int64_t>::max());
  twin.Both({Row(0, 7, {47, 48})}, {});  // the prompt's last chunk samples
  EXPECT_EQ(backend.stats().prompt_rows, 9);
  EXPECT_EQ(backend.stats().output_rows, 0);
  EXPECT_EQ(dev.prompt_end(0), 9);
  for (int64_t len = 9; len < 12; ++len) twin.Both({Row(0, len, {}, 0)}, {});
  EXPECT_EQ(backend.prompt_end(0), 9);
  EXPECT_EQ(backend.stats().prompt_rows, 9);
  EXPECT_EQ(backend.stats().output_rows, 3);
  // A recompute of that sequence on slot 1 (its 9 prompt positions and 3
  // outputs in one row): the 3 run as output whatever the chunk.
  RowPlan again = Row(1, 0, {40, 41, 42, 43, 44, 45, 46, 47, 48, 5, 6, 7});
  again.output_from = 9;
  twin.Both({again}, {0});
  EXPECT_EQ(backend.stats().prompt_rows, 18);
  EXPECT_EQ(backend.stats().output_rows, 6);
  EXPECT_EQ(dev.prompt_end(1), 9);
  twin.Both({Row(1, 12, {}, 0)}, {});
  EXPECT_EQ(backend.stats().output_rows, 7);
  // A prompt scored on the model (prompt logprobs stay off the backend),
  // then decoded there: imported, its prompt end sent after the import.
  RowPlan scored = Row(2, 0, {30, 31, 32, 33, 34, 35});
  scored.prompt_logprobs = 1;
  scored.prompt_end = 6;
  twin.Both({scored}, {});
  EXPECT_EQ(backend.stats().imports, 0);
  twin.Both({Row(2, 6, {}, 0)}, {});
  EXPECT_EQ(backend.stats().imports, 1);
  EXPECT_EQ(backend.prompt_end(2), 6);
  EXPECT_EQ(backend.stats().prompt_rows, 18);
  EXPECT_EQ(backend.stats().output_rows, 8);
}

}  // namespace
}  // namespace weir::worker
