#include "coordinator/http/openai_response.h"

#include <gtest/gtest.h>

#include "absl/strings/str_split.h"

namespace weir::coordinator::http {
namespace {

constexpr Endpoint kCompletions = Endpoint::kCompletions;
constexpr Endpoint kChat = Endpoint::kChatCompletions;

TEST(OpenAiResponseTest, StatusCodesMapToHttp) {
  struct Case {
    grpc::StatusCode code;
    int http;
    const char* type;
  };
  const Case cases[] = {
      {grpc::StatusCode::INVALID_ARGUMENT, 400, "invalid_request_error"},
      {grpc::StatusCode::FAILED_PRECONDITION, 400, "invalid_request_error"},
      {grpc::StatusCode::UNAUTHENTICATED, 401, "authentication_error"},
      {grpc::StatusCode::PERMISSION_DENIED, 403, "permission_error"},
      {grpc::StatusCode::NOT_FOUND, 404, "invalid_request_error"},
      {grpc::StatusCode::ALREADY_EXISTS, 409, "invalid_request_error"},
      {grpc::StatusCode::RESOURCE_EXHAUSTED, 429, "rate_limit_error"},
      {grpc::StatusCode::UNIMPLEMENTED, 501, "invalid_request_error"},
      {grpc::StatusCode::UNAVAILABLE, 503, "server_error"},
      {grpc::StatusCode::DEADLINE_EXCEEDED, 504, "server_error"},
      {grpc::StatusCode::ABORTED, 500, "server_error"},
      {grpc::StatusCode::INTERNAL, 500, "server_error"},
  };
  for (const Case& c : cases) {
    const ApiError e = ToApiError(grpc::Status(c.code, "why"), kCompletions);
    EXPECT_EQ(e.http_status, c.http) << c.code;
    EXPECT_EQ(e.type, c.type) << c.code;
    EXPECT_EQ(e.message, "why");
  }
  EXPECT_EQ(
      ToApiError(grpc::Status(grpc::StatusCode::NOT_FOUND, "unknown model \"x\""), kChat).code,
      "model_not_found");
}

TEST(OpenAiResponseTest, EngineFieldPathsBecomeOpenAiParams) {
  struct Case {
    const char* message;
    Endpoint endpoint;
    const char* param;
  };
  const Case cases[] = {
      {"sampling.temperature: must be finite and >= 0", kCompletions, "temperature"},
      {"sampling.top_p: must be in (0, 1]", kChat, "top_p"},
      {"sampling.top_k: must be >= 0", kChat, "top_k"},
      {"sampling.min_p: must be in [0, 1]", kChat, "min_p"},
      {"sampling.repetition_penalty: must be finite and > 0", kChat, "repetition_penalty"},
      {"sampling.presence_penalty: must be in [-2, 2]", kChat, "presence_penalty"},
      {"sampling.frequency_penalty: must be in [-2, 2]", kChat, "frequency_penalty"},
      {"sampling.logit_bias: token id 99999 outside [0, 100)", kChat, "logit_bias"},
      {"sampling.num_samples: at most 1", kChat, "n"},
      {"stop.max_new_tokens: must be >= 1", kChat, "max_tokens"},
      {"stop.min_new_tokens: exceeds max_new_tokens", kChat, "min_tokens"},
      {"stop.stop_token_ids: token id >= vocab size", kChat, "stop_token_ids"},
      {"stop: more than 16 stop entries", kChat, "stop"},
      {"constraint: GRAMMAR_INVALID: bad schema", kChat, "response_format"},
      {"output.top_logprobs: at most 0", kCompletions, "logprobs"},
      {"tokens.ids: token 5000 >= vocab size 100", kCompletions, "prompt"},
      {"input: the prompt is empty", kChat, "messages"},
      {"template kwarg 'x' is not allowed", kChat, "chat_template_kwargs"},
      {"unsupported chat role 'tool'", kChat, "messages"},
  };
  for (const Case& c : cases) {
    const ApiError e =
        ToApiError(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, c.message), c.endpoint);
    EXPECT_EQ(e.http_status, 400) << c.message;
    EXPECT_EQ(e.param, c.param) << c.message;
  }
  const ApiError too_long = ToApiError(
      grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "PROMPT_TOO_LONG: 9000 tokens, limit 4095"),
      kCompletions);
  EXPECT_EQ(too_long.param, "prompt");
  EXPECT_EQ(too_long.code, "context_length_exceeded");
  // The message names the OpenAI parameter, not the engine's path.
  EXPECT_EQ(ToApiError(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                    "sampling.temperature: must be finite and >= 0"),
                       kChat)
                .message,
            "temperature: must be finite and >= 0");
}

TEST(OpenAiResponseTest, ErrorBodyHasTheOpenAiShape) {
  const Json body = ErrorBody(ApiError{.http_status = 400,
                                       .type = "invalid_request_error",
                                       .message = "m",
                                       .param = "n",
                                       .code = ""});
  EXPECT_EQ(body, Json::parse(R"({"error": {"message": "m", "type": "invalid_request_error",
                                            "param": "n", "code": null}})"));
}

TEST(OpenAiResponseTest, FinishReasons) {
  EXPECT_EQ(FinishReasonJson(v1::FINISH_REASON_EOS), "stop");
  EXPECT_EQ(FinishReasonJson(v1::FINISH_REASON_STOP_SEQUENCE), "stop");
  EXPECT_EQ(FinishReasonJson(v1::FINISH_REASON_STOP_TOKEN), "stop");
  EXPECT_EQ(FinishReasonJson(v1::FINISH_REASON_GRAMMAR_TERMINATED), "stop");
  EXPECT_EQ(FinishReasonJson(v1::FINISH_REASON_MAX_TOKENS), "length");
  EXPECT_EQ(FinishReasonJson(v1::FINISH_REASON_CONTEXT_LIMIT), "length");
  EXPECT_EQ(FinishReasonJson(v1::FINISH_REASON_CANCELLED), "abort");
  EXPECT_TRUE(FinishReasonJson(v1::FINISH_REASON_UNSPECIFIED).is_null());
}

v1::GenerateEvent Accepted(uint32_t prompt_tokens) {
  v1::GenerateEvent e;
  e.mutable_accepted()->set_prompt_tokens(prompt_tokens);
  return e;
}

v1::GenerateEvent Delta(const std::string& text, uint32_t token) {
  v1::GenerateEvent e;
  e.mutable_delta()->set_text(text);
  e.mutable_delta()->add_token_ids(token);
  return e;
}

v1::GenerateEvent Final(v1::FinishReason reason, uint32_t prompt, uint32_t completion) {
  v1::GenerateEvent e;
  e.mutable_final()->set_reason(reason);
  e.mutable_final()->mutable_usage()->set_prompt_tokens(prompt);
  e.mutable_final()->mutable_usage()->set_completion_tokens(completion);
  return e;
}

// The JSON payloads of "data: ..." events.
std::vector<std::string> Payloads(const std::string& sse) {
  std::vector<std::string> out;
  for (absl::string_view part : absl::StrSplit(sse, "\n\n", absl::SkipEmpty())) {
    EXPECT_TRUE(absl::StartsWith(part, "data: ")) << part;
    out.emplace_back(part.substr(6));
  }
  return out;
}

TEST(OpenAiResponseTest, CompletionWithTwoPromptsAndEcho) {
  OpenAiRequest request;
  request.endpoint = kCompletions;
  request.calls.resize(2);
  request.echo = {"A", "B"};
  ResponseBuilder b(request, "cmpl-1", 100, "tiny", nullptr);
  b.OnEvent(1, Accepted(2), nullptr);
  b.OnEvent(0, Accepted(3), nullptr);
  b.OnEvent(0, Delta(" x", 5), nullptr);
  b.OnEvent(1, Delta(" y", 6), nullptr);
  b.OnEvent(0, Final(v1::FINISH_REASON_MAX_TOKENS, 3, 1), nullptr);
  v1::GenerateEvent stop = Final(v1::FINISH_REASON_STOP_SEQUENCE, 2, 1);
  stop.mutable_final()->set_stop_text("\n");
  b.OnEvent(1, stop, nullptr);
  EXPECT_EQ(b.Response(), Json::parse(R"({
      "id": "cmpl-1", "object": "text_completion", "created": 100, "model": "tiny",
      "choices": [
        {"index": 0, "text": "A x", "logprobs": null, "finish_reason": "length",
         "stop_reason": null},
        {"index": 1, "text": "B y", "logprobs": null, "finish_reason": "stop",
         "stop_reason": "\n"}],
      "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7,
                "completion_tokens_details": {"accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}}})"));
}

// Speculative decoding: Usage.accepted_draft_tokens and rejected_draft_tokens
// of every sample, summed, as OpenAI's completion_tokens_details
// accepted_prediction_tokens and rejected_prediction_tokens, in the response
// and in the stream's usage chunk.
TEST(OpenAiResponseTest, UsageReportsAcceptedDraftTokens) {
  OpenAiRequest request;
  request.endpoint = kChat;
  request.calls.resize(1);
  request.n = 2;
  request.stream = true;
  request.include_usage = true;
  ResponseBuilder b(request, "chatcmpl-8", 100, "tiny", nullptr);
  std::string sse;
  b.OnEvent(0, Accepted(4), &sse);
  for (uint32_t sample = 0; sample < 2; ++sample) {
    v1::GenerateEvent done = Final(v1::FINISH_REASON_MAX_TOKENS, 4, 6);
    done.mutable_final()->set_sample_index(sample);
    done.mutable_final()->mutable_usage()->set_accepted_draft_tokens(3 + sample);
    done.mutable_final()->mutable_usage()->set_rejected_draft_tokens(5 * sample + 2);
    b.OnEvent(0, done, &sse);
  }
  const Json expected = Json::parse(R"({"prompt_tokens": 4, "completion_tokens": 12,
      "total_tokens": 16, "completion_tokens_details": {"accepted_prediction_tokens": 7,
      "rejected_prediction_tokens": 9}})");
  EXPECT_EQ(b.Response()["usage"], expected);
  sse += b.StreamTail();
  const std::vector<std::string> payloads = Payloads(sse);
  ASSERT_GE(payloads.size(), 2u) << sse;
  EXPECT_EQ(Json::parse(payloads[payloads.size() - 2])["usage"], expected);
}

TEST(OpenAiResponseTest, ChatStreamChunks) {
  OpenAiRequest request;
  request.endpoint = kChat;
  request.calls.resize(1);
  request.stream = true;
  request.include_usage = true;
  ResponseBuilder b(request, "chatcmpl-7", 100, "tiny", nullptr);
  std::string sse;
  b.OnEvent(0, Accepted(4), &sse);
  b.OnEvent(0, Delta("Hel", 1), &sse);
  b.OnEvent(0, Delta("", 2), &sse);  // mid-character: no chunk
  b.OnEvent(0, Delta("lo", 3), &sse);
  b.OnEvent(0, Final(v1::FINISH_REASON_EOS, 4, 3), &sse);
  sse += b.StreamTail();
  const std::vector<std::string> payloads = Payloads(sse);
  ASSERT_EQ(payloads.size(), 6u) << sse;
  const Json first = Json::parse(payloads[0]);
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["id"], "chatcmpl-7");
  EXPECT_TRUE(first["usage"].is_null());
  EXPECT_EQ(first["choices"][0]["delta"], Json::parse(R"({"role": "assistant", "content": ""})"));
  EXPECT_EQ(Json::parse(payloads[1])["choices"][0]["delta"]["content"], "Hel");
  EXPECT_EQ(Json::parse(payloads[2])["choices"][0]["delta"]["content"], "lo");
  const Json last = Json::parse(payloads[3]);
  EXPECT_EQ(last["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(last["choices"][0]["delta"], Json::object());
  const Json usage = Json::parse(payloads[4]);
  EXPECT_EQ(usage["choices"], Json::array());
  EXPECT_EQ(usage["usage"], Json::parse(R"({"prompt_tokens": 4, "completion_tokens": 3,
                                            "total_tokens": 7, "completion_tokens_details":
                                            {"accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}})"));
  EXPECT_EQ(payloads[5], "[DONE]");
}

TEST(OpenAiResponseTest, StreamWithoutUsageEndsWithDone) {
  OpenAiRequest request;
  request.endpoint = kCompletions;
  request.calls.resize(1);
  request.stream = true;
  ResponseBuilder b(request, "cmpl-1", 1, "tiny", nullptr);
  std::string sse;
  b.OnEvent(0, Accepted(1), &sse);  // completions: no role chunk
  b.OnEvent(0, Delta("a", 1), &sse);
  b.OnEvent(0, Final(v1::FINISH_REASON_MAX_TOKENS, 1, 1), &sse);
  sse += b.StreamTail();
  const std::vector<std::string> payloads = Payloads(sse);
  ASSERT_EQ(payloads.size(), 3u) << sse;
  EXPECT_FALSE(Json::parse(payloads[0]).contains("usage"));
  EXPECT_EQ(Json::parse(payloads[0])["choices"][0]["text"], "a");
  EXPECT_EQ(payloads[2], "[DONE]");
  const std::vector<std::string> error = Payloads(ResponseBuilder::StreamError(
      ApiError{.http_status = 503, .type = "server_error", .message = "gone"}));
  ASSERT_EQ(error.size(), 2u);
  EXPECT_EQ(Json::parse(error[0])["error"]["message"], "gone");
}

v1::TokenLogprobs Logprob(uint32_t id, float logprob, std::vector<std::pair<uint32_t, float>> top) {
  v1::TokenLogprobs out;
  out.set_token_id(id);
  out.set_logprob(logprob);
  for (auto [t, l] : top) {
    v1::TopLogprob* alt = out.add_top();
    alt->set_token_id(t);
    alt->set_logprob(l);
  }
  return out;
}

TEST(OpenAiResponseTest, LogprobsInBothFormats) {
  auto bytes = [](uint32_t id) { return std::string(1, static_cast<char>('a' + id)); };
  v1::GenerateEvent delta = Delta("bc", 1);
  *delta.mutable_delta()->add_logprobs() = Logprob(1, -0.5f, {{1, -0.5f}, {2, -1.5f}});
  *delta.mutable_delta()->add_logprobs() = Logprob(2, -0.25f, {{2, -0.25f}, {0, -2.0f}});

  OpenAiRequest completion;
  completion.endpoint = kCompletions;
  completion.calls.resize(1);
  completion.logprobs = 1;
  ResponseBuilder c(completion, "cmpl-1", 1, "tiny", bytes);
  c.OnEvent(0, Accepted(1), nullptr);
  c.OnEvent(0, delta, nullptr);
  EXPECT_EQ(c.Response()["choices"][0]["logprobs"], Json::parse(R"({
      "tokens": ["b", "c"], "token_logprobs": [-0.5, -0.25],
      "top_logprobs": [{"b": -0.5}, {"c": -0.25}], "text_offset": [0, 1]})"));

  OpenAiRequest chat;
  chat.endpoint = kChat;
  chat.calls.resize(1);
  chat.logprobs = 2;
  ResponseBuilder h(chat, "chatcmpl-1", 1, "tiny", bytes);
  h.OnEvent(0, Accepted(1), nullptr);
  h.OnEvent(0, delta, nullptr);
  const Json content = h.Response()["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 2u);
  EXPECT_EQ(content[0], Json::parse(R"({"token": "b", "logprob": -0.5, "bytes": [98],
      "top_logprobs": [{"token": "b", "logprob": -0.5, "bytes": [98]},
                       {"token": "c", "logprob": -1.5, "bytes": [99]}]})"));
}

}  // namespace
}  // namespace weir::coordinator::http
