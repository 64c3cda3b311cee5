#include "coordinator/request_builder.h"

#include <cmath>

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
  request.mutable_stop()->set_max_new_tokens(4000000000u);
  request.mutable_sampling()->set_seed(5);
  absl::StatusOr<BuiltRequest> built = BuildRequest(request, Limits(), nullptr, 77);
  ASSERT_TRUE(built.ok());
  EXPECT_EQ(built->max_new_tokens, 60u);
  EXPECT_EQ(built->seed, 5u);
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
  // Without a constraint nothing is compiled and none is carried.
  auto plain = BuildRequest(Tokens({1, 2}), limits, nullptr, 0);
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->constraint.kind_case(), v1::StructuredOutput::KIND_NOT_SET);
}

}  // namespace
}  // namespace weir::coordinator
