#include "coordinator/generation_tracker.h"

#include <cstdlib>

#include "gtest/gtest.h"

namespace weir::coordinator {
namespace {

constexpr uint32_t kEos = 1;  // models/random/tiny: <｜end▁of▁sentence｜>
constexpr char kEosText[] = "<｜end▁of▁sentence｜>";

std::unique_ptr<tokenizer::Tokenizer> TinyTokenizer() {
  auto tok = tokenizer::Tokenizer::FromDirectory(std::string(std::getenv("TEST_SRCDIR")) +
                                                 "/weir/models/random/tiny");
  EXPECT_TRUE(tok.ok()) << tok.status();
  return tok.ok() ? std::move(*tok) : nullptr;
}

std::vector<uint32_t> Encode(const tokenizer::Tokenizer& tok, const std::string& text) {
  absl::StatusOr<std::vector<int32_t>> ids = tok.Encode(text, /*add_special_tokens=*/false);
  EXPECT_TRUE(ids.ok()) << ids.status();
  return std::vector<uint32_t>(ids->begin(), ids->end());
}

BuiltRequest Built() {
  BuiltRequest built;
  built.prompt = {5, 6, 7};
  built.max_new_tokens = 16;
  built.eos_token_ids = {kEos};
  return built;
}

// Runs `tokens` (the last one with `finish`) through a tracker, one event per
// token as the step loop sends them; returns the Final with full output and
// the concatenated delta text.
std::pair<v1::GenerateEvent::Final, std::string> Track(const BuiltRequest& built,
                                                     const tokenizer::Tokenizer& tok,
                                                     const std::vector<uint32_t>& tokens,
                                                     scheduler::FinishReason finish) {
  GenerationTracker tracker(built, &tok, absl::Now());
  std::string streamed;
  for (size_t i = 0; i < tokens.size(); ++i) {
    SeqEvent event;
    event.tokens = {tokens[i]};
    if (i + 1 == tokens.size()) event.finish = finish;
    GenerationTracker::Update update = tracker.Apply(event);
    EXPECT_TRUE(update.error.ok());
    EXPECT_EQ(update.done, i + 1 == tokens.size());
    streamed += update.delta.text();
  }
  return {tracker.Final(/*with_full_output=*/true), streamed};
}

TEST(GenerationTrackerTest, TheEndingEosIsNotText) {
  std::unique_ptr<tokenizer::Tokenizer> tok = TinyTokenizer();
  ASSERT_NE(tok, nullptr);
  ASSERT_EQ(tok->Decode(std::vector<int32_t>{static_cast<int32_t>(kEos)}, false), kEosText);
  std::vector<uint32_t> tokens = Encode(*tok, "non that onto mind");
  tokens.push_back(kEos);
  const BuiltRequest built = Built();
  auto [final_event, streamed] = Track(built, *tok, tokens, scheduler::FinishReason::kEos);
  EXPECT_EQ(final_event.reason(), v1::FINISH_REASON_EOS);
  EXPECT_EQ(final_event.full_text(), "non that onto mind");
  EXPECT_EQ(streamed, "non that onto mind");
  // The id is still reported and counted.
  ASSERT_EQ(final_event.full_token_ids_size(), static_cast<int>(tokens.size()));
  EXPECT_EQ(final_event.full_token_ids(tokens.size() - 1), kEos);
  EXPECT_EQ(final_event.usage().completion_tokens(), tokens.size());

  // A constrained request whose grammar accepted the EOS (with ignore_eos the
  // scheduler reports it as the worker's end): still not text.
  auto [grammar_end, grammar_streamed] =
      Track(built, *tok, tokens, scheduler::FinishReason::kWorkerEnded);
  EXPECT_EQ(grammar_end.reason(), v1::FINISH_REASON_GRAMMAR_TERMINATED);
  EXPECT_EQ(grammar_end.full_text(), "non that onto mind");

  // include_stop_in_output keeps it.
  BuiltRequest keep = Built();
  keep.include_stop_in_output = true;
  auto [kept, kept_streamed] = Track(keep, *tok, tokens, scheduler::FinishReason::kEos);
  EXPECT_EQ(kept.full_text(), std::string("non that onto mind") + kEosText);
  EXPECT_EQ(kept_streamed, kept.full_text());
}

TEST(GenerationTrackerTest, TheEndingStopTokenIsNotText) {
  std::unique_ptr<tokenizer::Tokenizer> tok = TinyTokenizer();
  ASSERT_NE(tok, nullptr);
  std::vector<uint32_t> tokens = Encode(*tok, "alpha beta gamma");
  const uint32_t stop = tokens.back();
  BuiltRequest built = Built();
  built.stop_token_ids = {stop};
  auto [final_event, streamed] = Track(built, *tok, tokens, scheduler::FinishReason::kStopToken);
  EXPECT_EQ(final_event.reason(), v1::FINISH_REASON_STOP_TOKEN);
  EXPECT_EQ(final_event.stop_token_id(), stop);
  const std::string without_stop =
      tok->Decode(std::vector<int32_t>(tokens.begin(), tokens.end() - 1), false);
  EXPECT_EQ(final_event.full_text(), without_stop);
  EXPECT_EQ(streamed, without_stop);
  EXPECT_EQ(final_event.usage().completion_tokens(), tokens.size());

  // A grammar end on an ordinary token keeps that token's text.
  auto [ended, ended_streamed] = Track(Built(), *tok, tokens, scheduler::FinishReason::kWorkerEnded);
  EXPECT_EQ(ended.full_text(), "alpha beta gamma");
  // So does a length limit.
  auto [length, length_streamed] = Track(Built(), *tok, tokens, scheduler::FinishReason::kMaxTokens);
  EXPECT_EQ(length.full_text(), "alpha beta gamma");
}

TEST(GenerationTrackerTest, AnEndWithoutTokensIsAnEmptyGrammarEnd) {
  std::unique_ptr<tokenizer::Tokenizer> tok = TinyTokenizer();
  ASSERT_NE(tok, nullptr);
  const BuiltRequest built = Built();
  GenerationTracker tracker(built, tok.get(), absl::Now());
  SeqEvent ended;
  ended.finish = scheduler::FinishReason::kWorkerEnded;
  GenerationTracker::Update update = tracker.Apply(ended);
  EXPECT_TRUE(update.done);
  EXPECT_EQ(update.delta.token_ids_size(), 0);
  v1::GenerateEvent::Final final_event = tracker.Final(true);
  EXPECT_EQ(final_event.reason(), v1::FINISH_REASON_GRAMMAR_TERMINATED);
  EXPECT_EQ(final_event.full_text(), "");
  EXPECT_EQ(final_event.usage().completion_tokens(), 0u);
}

v1::TokenLogprobs Scored(uint32_t token, float logprob) {
  v1::TokenLogprobs entry;
  entry.set_token_id(token);
  entry.set_logprob(logprob);
  entry.set_rank(1);
  return entry;
}

TEST(GenerationTrackerTest, LogprobsGoWithTheirTokensAndThePromptsWithTheFirst) {
  std::unique_ptr<tokenizer::Tokenizer> tok = TinyTokenizer();
  ASSERT_NE(tok, nullptr);
  BuiltRequest built = Built();
  built.prompt = Encode(*tok, "non that");
  ASSERT_GE(built.prompt.size(), 2u);
  built.top_logprobs = 2;
  built.prompt_logprobs = 0;
  built.echo_prompt = true;
  const std::vector<uint32_t> out = Encode(*tok, " onto mind");
  ASSERT_GE(out.size(), 2u);
  GenerationTracker tracker(built, tok.get(), absl::Now());

  // The step loop's prompt event (positions 1..) comes alone, before any token.
  SeqEvent prompt;
  for (size_t p = 1; p < built.prompt.size(); ++p) {
    prompt.prompt_logprobs.push_back(Scored(built.prompt[p], -1.0f * p));
  }
  GenerationTracker::Update none = tracker.Apply(prompt);
  EXPECT_FALSE(none.done);
  EXPECT_FALSE(none.delta.has_prompt_logprobs());
  EXPECT_TRUE(none.delta.text().empty());

  std::string text;
  for (size_t i = 0; i < out.size(); ++i) {
    SeqEvent event;
    event.tokens = {out[i]};
    event.logprobs = {Scored(out[i], -0.5f - i)};
    if (i + 1 == out.size()) event.finish = scheduler::FinishReason::kMaxTokens;
    GenerationTracker::Update update = tracker.Apply(event);
    ASSERT_EQ(update.delta.logprobs_size(), 1);
    EXPECT_EQ(update.delta.logprobs(0).token_id(), out[i]);
    EXPECT_FLOAT_EQ(update.delta.logprobs(0).logprob(), -0.5f - i);
    EXPECT_EQ(update.delta.has_prompt_logprobs(), i == 0);
    if (i == 0) {
      // Every prompt token; the first has nothing before it.
      const v1::PromptLogprobs& p = update.delta.prompt_logprobs();
      ASSERT_EQ(p.tokens_size(), static_cast<int>(built.prompt.size()));
      EXPECT_EQ(p.tokens(0).token_id(), built.prompt[0]);
      EXPECT_FALSE(p.tokens(0).has_rank());
      for (size_t k = 1; k < built.prompt.size(); ++k) {
        EXPECT_EQ(p.tokens(k).token_id(), built.prompt[k]);
        EXPECT_FLOAT_EQ(p.tokens(k).logprob(), -1.0f * k);
      }
      EXPECT_EQ(update.delta.text().rfind("non that", 0), 0u) << update.delta.text();
    }
    text += update.delta.text();
  }
  EXPECT_EQ(text, "non that onto mind");
  v1::GenerateEvent::Final final_event = tracker.Final(/*with_full_output=*/true);
  EXPECT_EQ(final_event.full_text(), "non that onto mind");
  EXPECT_EQ(final_event.logprobs_size(), static_cast<int>(out.size()));
  EXPECT_EQ(final_event.prompt_logprobs().tokens_size(), static_cast<int>(built.prompt.size()));
  EXPECT_EQ(final_event.usage().completion_tokens(), out.size());
  // Streamed: the Final does not repeat them.
  EXPECT_EQ(tracker.Final(/*with_full_output=*/false).logprobs_size(), 0);
}

TEST(GenerationTrackerTest, MakeSubmissionMarksRequestsThatCanProduceNoToken) {
  BuiltRequest built = Built();
  auto queue = std::make_shared<SeqEventQueue>();
  EXPECT_FALSE(MakeSubmission(RequestId(1), built, queue, 0).no_tokens);
  built.constraint_admits_only_empty = true;
  EXPECT_TRUE(MakeSubmission(RequestId(2), built, queue, 0).no_tokens);
}

}  // namespace
}  // namespace weir::coordinator
