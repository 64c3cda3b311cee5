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

}  // namespace
}  // namespace weir::coordinator
