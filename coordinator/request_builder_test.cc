#include "coordinator/request_builder.h"

#include <cmath>

#include "coordinator/api_error.h"
#include "gtest/gtest.h"

namespace weir::coordinator {
namespace {

RequestLimits Limits() {
  RequestLimits limits;
  limits.vocab_size = 100;
  limits.max_context_tokens = 64;
  limits.default_max_new_tokens = 16;
  limits.max_stop_sequences = 2;
  limits.max_stop_string_len = 8;
  return limits;
}

v1::GenerateRequest Tokens(std::initializer_list<uint32_t> ids) {
  v1::GenerateRequest request;
  for (uint32_t id : ids) request.mutable_tokens()->add_ids(id);
  return request;
}

TEST(RequestBuilderTest, TokenPromptWithDefaults) {
  absl::StatusOr<BuiltRequest> built = BuildRequest(Tokens({1, 2, 3}), Limits(), nullptr, 77);
  ASSERT_TRUE(built.ok()) << built.status();
  EXPECT_EQ(built->prompt, (std::vector<uint32_t>{1, 2, 3}));
  EXPECT_EQ(built->max_new_tokens, 16u);
  EXPECT_EQ(built->seed, 77u);
  EXPECT_FLOAT_EQ(built->sampling.temperature(), 1.0f);
  EXPECT_TRUE(built->return_text);
}

TEST(RequestBuilderTest, MaxNewTokensIsCappedByTheContext) {
  v1::GenerateRequest request = Tokens({1, 2, 3, 4});
  request.mutable_stop()->set_max_new_tokens(63);  // The limit: a 1-token prompt's room.
  request.mutable_sampling()->set_seed(5);
  absl::StatusOr<BuiltRequest> built = BuildRequest(request, Limits(), nullptr, 77);
  ASSERT_TRUE(built.ok()) << built.status();
  EXPECT_EQ(built->max_new_tokens, 60u);
  EXPECT_EQ(built->seed, 5u);
}

TEST(RequestBuilderTest, MaxNewTokensAboveTheAdvertisedLimitIsRefused) {
  EXPECT_EQ(MaxNewTokensLimit(64), 63);
  for (uint32_t n : {64u, 4000000000u, 4294967295u}) {
    v1::GenerateRequest request = Tokens({1, 2, 3, 4});
    request.mutable_stop()->set_max_new_tokens(n);
    absl::Status status = BuildRequest(request, Limits(), nullptr, 77).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << n;
    EXPECT_NE(status.message().find("stop.max_new_tokens"), absl::string_view::npos) << status;
  }
}

TEST(RequestBuilderTest, PromptLimitIsWhatModelInfoAdvertises) {
  const int64_t limit = MaxPromptTokens(64);
  EXPECT_EQ(limit, 63);
  v1::GenerateRequest longest;
  for (int i = 0; i < limit; ++i) longest.mutable_tokens()->add_ids(1);
  absl::StatusOr<BuiltRequest> built = BuildRequest(longest, Limits(), nullptr, 0);
  ASSERT_TRUE(built.ok()) << built.status();
  EXPECT_EQ(built->max_new_tokens, 1u);
  longest.mutable_tokens()->add_ids(1);
  absl::Status too_long = BuildRequest(longest, Limits(), nullptr, 0).status();
  EXPECT_EQ(too_long.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ErrorReason(too_long), "PROMPT_TOO_LONG");
  v1::ErrorStatus item;
  ToErrorStatus(too_long, &item);
  EXPECT_EQ(item.metadata().at("tokens"), "64");
  EXPECT_EQ(item.metadata().at("limit"), "63");
}

TEST(RequestBuilderTest, TruncatePromptTokensKeepsTheLastTokens) {
  v1::GenerateRequest request;
  for (uint32_t i = 0; i < 80; ++i) request.mutable_tokens()->add_ids(i);
  request.mutable_stop()->set_max_new_tokens(10);
  // -1: the last max_context - max_new_tokens = 54 tokens.
  request.set_truncate_prompt_tokens(-1);
  absl::StatusOr<BuiltRequest> built = BuildRequest(request, Limits(), nullptr, 0);
  ASSERT_TRUE(built.ok()) << built.status();
  ASSERT_EQ(built->prompt.size(), 54u);
  EXPECT_EQ(built->prompt.front(), 26u);
  EXPECT_EQ(built->prompt.back(), 79u);
  EXPECT_EQ(built->max_new_tokens, 10u);
  // -1 without max_new_tokens uses the default (16).
  request.mutable_stop()->clear_max_new_tokens();
  built = BuildRequest(request, Limits(), nullptr, 0);
  ASSERT_TRUE(built.ok()) << built.status();
  EXPECT_EQ(built->prompt.size(), 48u);
  // k keeps the last k; a shorter prompt is unchanged.
  request.set_truncate_prompt_tokens(5);
  built = BuildRequest(request, Limits(), nullptr, 0);
  ASSERT_TRUE(built.ok()) << built.status();
  EXPECT_EQ(built->prompt, (std::vector<uint32_t>{75, 76, 77, 78, 79}));
  v1::GenerateRequest short_prompt = Tokens({1, 2});
  short_prompt.set_truncate_prompt_tokens(-1);
  built = BuildRequest(short_prompt, Limits(), nullptr, 0);
  ASSERT_TRUE(built.ok()) << built.status();
  EXPECT_EQ(built->prompt.size(), 2u);
  for (int32_t bad : {0, -2, 64, INT32_MIN}) {
    request.set_truncate_prompt_tokens(bad);
    EXPECT_EQ(BuildRequest(request, Limits(), nullptr, 0).status().code(),
              absl::StatusCode::kInvalidArgument)
        << bad;
  }
}

TEST(RequestBuilderTest, EmptyTextStopStringQueueTimeAndLabelsAreChecked) {
  const auto kBad = absl::StatusCode::kInvalidArgument;
  v1::GenerateRequest text;
  text.set_text("");
  absl::Status empty = BuildRequest(text, Limits(), nullptr, 0).status();
  EXPECT_EQ(empty.code(), kBad) << empty;  // Before the (missing) tokenizer is needed.
  EXPECT_NE(empty.message().find("text"), absl::string_view::npos) << empty;

  auto with = [](auto mutate) {
    v1::GenerateRequest r = Tokens({1});
    mutate(r);
    return BuildRequest(r, Limits(), nullptr, 0).status().code();
  };
  EXPECT_EQ(with([](auto& r) { r.mutable_stop()->add_stop_strings(""); }), kBad);
  EXPECT_EQ(with([](auto& r) { r.mutable_max_queue_time()->set_seconds(-1); }), kBad);
  EXPECT_EQ(with([](auto& r) { r.mutable_max_queue_time()->set_nanos(-5); }), kBad);
  EXPECT_EQ(with([](auto& r) {
              r.mutable_max_queue_time()->set_seconds(1);
              r.mutable_max_queue_time()->set_nanos(-5);
            }),
            kBad);
  EXPECT_EQ(with([](auto& r) { r.mutable_max_queue_time()->set_nanos(1000000000); }), kBad);
  EXPECT_EQ(with([](auto& r) { r.mutable_max_queue_time()->set_seconds(2); }),
            absl::StatusCode::kOk);
  EXPECT_EQ(with([](auto& r) {
              for (int i = 0; i < 16; ++i) (*r.mutable_labels())["k" + std::to_string(i)] = "v";
            }),
            absl::StatusCode::kOk);
  EXPECT_EQ(with([](auto& r) {
              for (int i = 0; i < 17; ++i) (*r.mutable_labels())["k" + std::to_string(i)] = "v";
            }),
            kBad);
  EXPECT_EQ(with([](auto& r) { (*r.mutable_labels())[""] = "v"; }), kBad);
  EXPECT_EQ(with([](auto& r) { (*r.mutable_labels())[std::string(65, 'k')] = "v"; }), kBad);
  EXPECT_EQ(with([](auto& r) { (*r.mutable_labels())["k"] = std::string(513, 'v'); }), kBad);
}

TEST(RequestBuilderTest, LogprobsUpToTheAdvertisedLimit) {
  RequestLimits limits = Limits();
  limits.max_top_logprobs = 20;
  v1::GenerateRequest request = Tokens({1, 2});
  request.mutable_output()->set_top_logprobs(20);
  request.mutable_output()->set_prompt_logprobs(0);
  request.mutable_output()->set_echo_prompt(true);
  absl::StatusOr<BuiltRequest> built = BuildRequest(request, limits, nullptr, 0);
  ASSERT_TRUE(built.ok()) << built.status();
  EXPECT_EQ(built->top_logprobs, 20u);
  ASSERT_TRUE(built->prompt_logprobs.has_value());
  EXPECT_EQ(*built->prompt_logprobs, 0u);
  EXPECT_TRUE(built->echo_prompt);
  EXPECT_FALSE(BuildRequest(Tokens({1}), limits, nullptr, 0)->prompt_logprobs.has_value());

  request.mutable_output()->set_top_logprobs(21);
  absl::Status over = BuildRequest(request, limits, nullptr, 0).status();
  EXPECT_EQ(over.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(over.message().find("output.top_logprobs: at most 20"), std::string::npos) << over;
  request.mutable_output()->set_top_logprobs(3);
  request.mutable_output()->set_prompt_logprobs(21);
  over = BuildRequest(request, limits, nullptr, 0).status();
  EXPECT_NE(over.message().find("output.prompt_logprobs: at most 20"), std::string::npos) << over;
}

TEST(RequestBuilderTest, SamplesUpToTheLimit) {
  RequestLimits limits = Limits();
  limits.max_num_samples = 4;
  v1::GenerateRequest request = Tokens({1});
  absl::StatusOr<BuiltRequest> one = BuildRequest(request, limits, nullptr, 0);
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->num_samples, 1u);  // 0 reads as 1
  request.mutable_sampling()->set_num_samples(4);
  absl::StatusOr<BuiltRequest> four = BuildRequest(request, limits, nullptr, 0);
  ASSERT_TRUE(four.ok());
  EXPECT_EQ(four->num_samples, 4u);
  request.mutable_sampling()->set_num_samples(5);
  EXPECT_EQ(BuildRequest(request, limits, nullptr, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(RequestBuilderTest, BadInputsAreInvalidArguments) {
  auto code = [](const v1::GenerateRequest& request) {
    return BuildRequest(request, Limits(), nullptr, 0).status().code();
  };
  const auto kBad = absl::StatusCode::kInvalidArgument;
  EXPECT_EQ(code(v1::GenerateRequest()), kBad);              // no input
  EXPECT_EQ(code(Tokens({})), kBad);                         // empty prompt
  EXPECT_EQ(code(Tokens({100})), kBad);                      // id >= vocab
  EXPECT_EQ(code(Tokens({0xFFFFFFFFu})), kBad);
  v1::GenerateRequest long_prompt;
  for (int i = 0; i < 64; ++i) long_prompt.mutable_tokens()->add_ids(1);
  absl::Status too_long = BuildRequest(long_prompt, Limits(), nullptr, 0).status();
  EXPECT_EQ(too_long.code(), kBad);
  EXPECT_NE(too_long.message().find("PROMPT_TOO_LONG"), std::string::npos);

  auto with = [](auto mutate) {
    v1::GenerateRequest r = Tokens({1});
    mutate(r);
    return BuildRequest(r, Limits(), nullptr, 0).status().code();
  };
  EXPECT_EQ(with([](auto& r) { r.mutable_sampling()->set_temperature(-1); }), kBad);
  EXPECT_EQ(with([](auto& r) { r.mutable_sampling()->set_temperature(NAN); }), kBad);
  EXPECT_EQ(with([](auto& r) { r.mutable_sampling()->set_top_p(0); }), kBad);
  EXPECT_EQ(with([](auto& r) { r.mutable_sampling()->set_top_k(-3); }), kBad);
  EXPECT_EQ(with([](auto& r) { r.mutable_sampling()->set_num_samples(1000000); }), kBad);
  EXPECT_EQ(with([](auto& r) { (*r.mutable_sampling()->mutable_logit_bias())[500] = 1; }), kBad);
  EXPECT_EQ(with([](auto& r) { r.mutable_stop()->set_max_new_tokens(0); }), kBad);
  EXPECT_EQ(with([](auto& r) { r.mutable_stop()->add_stop_token_ids(100); }), kBad);
  EXPECT_EQ(with([](auto& r) { r.mutable_stop()->add_stop_strings("much too long"); }), kBad);
  EXPECT_EQ(with([](auto& r) {
              for (int i = 0; i < 3; ++i) r.mutable_stop()->add_stop_strings("x");
            }),
            kBad);
  EXPECT_EQ(with([](auto& r) { r.mutable_output()->set_top_logprobs(5); }), kBad);
  EXPECT_EQ(with([](auto& r) { r.set_request_id(std::string(200, 'a')); }), kBad);
  EXPECT_EQ(with([](auto& r) { r.mutable_constraint()->set_regex("a+"); }),
            absl::StatusCode::kFailedPrecondition);
  v1::GenerateRequest text;
  text.set_text("hello");
  EXPECT_EQ(BuildRequest(text, Limits(), nullptr, 0).status().code(),
            absl::StatusCode::kFailedPrecondition);  // No tokenizer.
}

TEST(RequestBuilderTest, ConstraintsCompileAtAdmission) {
  // A byte-level vocabulary: ids 0..255 are single bytes, 256 is EOS.
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.push_back(std::string(1, static_cast<char>(b)));
  tokens.push_back("");
  auto vocab = grammar::Vocabulary::Create(std::move(tokens), {256}, {});
  ASSERT_TRUE(vocab.ok()) << vocab.status();
  grammar::GrammarCompiler compiler(*vocab);
  RequestLimits limits = Limits();
  limits.grammar = &compiler;
  limits.max_schema_bytes = 64;
  auto build = [&](auto&& edit) {
    v1::GenerateRequest r = Tokens({1, 2});
    edit(*r.mutable_constraint());
    return BuildRequest(r, limits, nullptr, 0);
  };
  auto ok = build([](v1::StructuredOutput& c) { c.set_regex("[0-9]{3}"); });
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->constraint.regex(), "[0-9]{3}");
  EXPECT_TRUE(build([](v1::StructuredOutput& c) { c.set_json_schema(R"({"type":"integer"})"); })
                  .ok());
  for (auto status : {build([](v1::StructuredOutput& c) { c.set_regex("(a"); }).status(),
                      build([](v1::StructuredOutput& c) { c.set_json_schema("{"); }).status(),
                      build([](v1::StructuredOutput& c) { c.set_ebnf("root ::= ("); }).status(),
                      build([](v1::StructuredOutput& c) { c.set_json_object(false); }).status(),
                      build([](v1::StructuredOutput& c) {
                        c.set_json_object(true);
                        c.set_whitespace_pattern("x*");
                      }).status()}) {
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_NE(status.message().find("GRAMMAR_INVALID"), absl::string_view::npos) << status;
  }
  absl::Status big = build([](v1::StructuredOutput& c) { c.set_regex(std::string(65, 'a')); })
                         .status();
  EXPECT_EQ(big.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(big.message().find("GRAMMAR_TOO_COMPLEX"), absl::string_view::npos) << big;
  EXPECT_FALSE(ok->constraint_admits_only_empty);
  // Constraints that admit only "": the request must end without a token.
  for (auto only_empty : {build([](v1::StructuredOutput& c) { c.set_regex(""); }),
                          build([](v1::StructuredOutput& c) { c.set_regex("()"); }),
                          build([](v1::StructuredOutput& c) { c.set_regex("a{0}"); }),
                          build([](v1::StructuredOutput& c) { c.set_ebnf(R"(root ::= "")"); }),
                          build([](v1::StructuredOutput& c) {
                            c.mutable_choice()->add_choices("");
                          })}) {
    ASSERT_TRUE(only_empty.ok()) << only_empty.status();
    EXPECT_TRUE(only_empty->constraint_admits_only_empty) << only_empty->constraint.DebugString();
  }
  auto optional = build([](v1::StructuredOutput& c) { c.set_regex("a?"); });
  ASSERT_TRUE(optional.ok()) << optional.status();
  EXPECT_FALSE(optional->constraint_admits_only_empty);
  // Without a constraint nothing is compiled and none is carried.
  auto plain = BuildRequest(Tokens({1, 2}), limits, nullptr, 0);
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->constraint.kind_case(), v1::StructuredOutput::KIND_NOT_SET);
}

}  // namespace
}  // namespace weir::coordinator
