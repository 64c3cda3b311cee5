#include "coordinator/http/openai_request.h"

#include <gtest/gtest.h>

#include "coordinator/http/openai_response.h"

namespace weir::coordinator::http {
namespace {

ServedModel Served() {
  ServedModel served;
  served.name = "tiny";
  served.max_context_tokens = 4096;
  served.max_new_tokens_limit = 4096;
  served.max_num_samples = 1;
  served.max_top_logprobs = 0;
  served.max_stop_sequences = 4;
  served.max_logit_bias_entries = 2;
  served.structured_output_kinds = {"json_schema", "json_object", "regex", "ebnf", "choice"};
  served.max_prompts = 3;
  return served;
}

OpenAiRequest Parse(Endpoint endpoint, const char* body, const ServedModel& served = Served()) {
  absl::StatusOr<OpenAiRequest> out = ParseOpenAiRequest(endpoint, Json::parse(body), served);
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? *out : OpenAiRequest();
}

// The HTTP answer a bad request gets: status and param.
std::pair<int, std::string> Refusal(Endpoint endpoint, const char* body,
                                    const ServedModel& served = Served()) {
  absl::StatusOr<OpenAiRequest> out = ParseOpenAiRequest(endpoint, Json::parse(body), served);
  if (out.ok()) return {200, ""};
  const ApiError error = ToApiError(out.status(), endpoint);
  return {error.http_status, error.param};
}

constexpr Endpoint kCompletions = Endpoint::kCompletions;
constexpr Endpoint kChat = Endpoint::kChatCompletions;

TEST(OpenAiRequestTest, CompletionMapsEverySamplingAndStopField) {
  const OpenAiRequest r = Parse(kCompletions, R"({
      "model": "tiny", "prompt": "Hello", "max_tokens": 7, "temperature": 0.5,
      "top_p": 0.9, "top_k": 40, "min_p": 0.05, "presence_penalty": 0.5,
      "frequency_penalty": -0.5, "repetition_penalty": 1.1, "seed": 42,
      "logit_bias": {"12": -100, "7": 3.5}, "stop": ["\n", "END"],
      "stop_token_ids": [3], "min_tokens": 2, "ignore_eos": true,
      "include_stop_str_in_output": true, "skip_special_tokens": false,
      "priority": -3, "user": "someone", "n": 1, "best_of": 1})");
  ASSERT_EQ(r.calls.size(), 1u);
  const v1::GenerateRequest& g = r.calls[0];
  EXPECT_EQ(g.text(), "Hello");
  EXPECT_EQ(g.priority(), -3);
  EXPECT_EQ(g.tenant(), "someone");
  EXPECT_EQ(g.stop().max_new_tokens(), 7u);
  EXPECT_FLOAT_EQ(g.sampling().temperature(), 0.5f);
  EXPECT_FLOAT_EQ(g.sampling().top_p(), 0.9f);
  EXPECT_EQ(g.sampling().top_k(), 40);
  EXPECT_FLOAT_EQ(g.sampling().min_p(), 0.05f);
  EXPECT_FLOAT_EQ(g.sampling().presence_penalty(), 0.5f);
  EXPECT_FLOAT_EQ(g.sampling().frequency_penalty(), -0.5f);
  EXPECT_FLOAT_EQ(g.sampling().repetition_penalty(), 1.1f);
  EXPECT_EQ(g.sampling().seed(), 42u);
  EXPECT_EQ(g.sampling().logit_bias().size(), 2u);
  EXPECT_FLOAT_EQ(g.sampling().logit_bias().at(12), -100.0f);
  EXPECT_FLOAT_EQ(g.sampling().logit_bias().at(7), 3.5f);
  EXPECT_EQ(g.sampling().num_samples(), 0u);  // n = 1: the default
  ASSERT_EQ(g.stop().stop_strings_size(), 2);
  EXPECT_EQ(g.stop().stop_strings(0), "\n");
  EXPECT_EQ(g.stop().stop_strings(1), "END");
  ASSERT_EQ(g.stop().stop_token_ids_size(), 1);
  EXPECT_EQ(g.stop().stop_token_ids(0), 3u);
  EXPECT_EQ(g.stop().min_new_tokens(), 2u);
  EXPECT_TRUE(g.stop().ignore_eos());
  EXPECT_TRUE(g.stop().include_stop_in_output());
  EXPECT_FALSE(g.output().skip_special_tokens());
  EXPECT_TRUE(g.output().stream_tokens());
  EXPECT_EQ(g.priority(), -3);
  EXPECT_FALSE(r.stream);
  EXPECT_FALSE(r.logprobs.has_value());
  EXPECT_TRUE(r.echo.empty());
}

TEST(OpenAiRequestTest, CompletionDefaults) {
  const OpenAiRequest r = Parse(kCompletions, R"({"prompt": "x"})");
  const v1::GenerateRequest& g = r.calls[0];
  // OpenAI's default for completions; chat leaves it to the server.
  EXPECT_EQ(g.stop().max_new_tokens(), 16u);
  EXPECT_FALSE(g.sampling().has_temperature());
  EXPECT_FALSE(g.sampling().has_seed());
  EXPECT_FALSE(g.sampling().has_top_k());
  EXPECT_TRUE(g.output().skip_special_tokens());
  EXPECT_EQ(r.n, 1u);
  const OpenAiRequest chat = Parse(kChat, R"({"messages": [{"role": "user", "content": "x"}]})");
  EXPECT_FALSE(chat.calls[0].stop().has_max_new_tokens());
}

TEST(OpenAiRequestTest, PromptShapes) {
  OpenAiRequest r = Parse(kCompletions, R"({"prompt": [1, 2, 3]})");
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].tokens().ids_size(), 3);
  r = Parse(kCompletions, R"({"prompt": ["a", "b"], "max_tokens": 3, "seed": 1})");
  ASSERT_EQ(r.calls.size(), 2u);
  EXPECT_EQ(r.calls[1].text(), "b");
  EXPECT_EQ(r.calls[1].stop().max_new_tokens(), 3u);  // common fields on every call
  EXPECT_EQ(r.calls[1].sampling().seed(), 1u);
  r = Parse(kCompletions, R"({"prompt": [[5, 6], [7]]})");
  ASSERT_EQ(r.calls.size(), 2u);
  EXPECT_EQ(r.calls[1].tokens().ids(0), 7u);
  EXPECT_EQ(Refusal(kCompletions, R"({"prompt": ["a", "b", "c", "d"]})"),
            std::make_pair(400, std::string("prompt")));
  EXPECT_EQ(Refusal(kCompletions, R"({"prompt": []})").second, "prompt");
  EXPECT_EQ(Refusal(kCompletions, R"({"prompt": [1, -2]})").second, "prompt");
  EXPECT_EQ(Refusal(kCompletions, R"({"prompt": [[]]})").second, "prompt");
  EXPECT_EQ(Refusal(kCompletions, R"({"prompt": 5})").second, "prompt");
  EXPECT_EQ(Refusal(kCompletions, R"({"prompt": [{"a": 1}]})").second, "prompt");
  EXPECT_EQ(Refusal(kCompletions, R"({})").second, "prompt");
}

TEST(OpenAiRequestTest, ChatMessagesAndTemplateKwargs) {
  const OpenAiRequest r = Parse(kChat, R"({
      "model": "tiny", "max_completion_tokens": 9, "max_tokens": 100,
      "messages": [{"role": "developer", "content": "Be brief."},
                   {"role": "user", "content": [{"type": "text", "text": "Hi "},
                                                {"type": "text", "text": "there"}]},
                   {"role": "assistant", "content": "Hello"},
                   {"role": "user", "content": "Bye", "name": "bob"}],
      "chat_template_kwargs": {"thinking": true},
      "parallel_tool_calls": true, "store": false, "metadata": {"k": "v"}})");
  ASSERT_EQ(r.calls.size(), 1u);
  const v1::ChatInput& chat = r.calls[0].chat();
  ASSERT_EQ(chat.messages_size(), 4);
  EXPECT_EQ(chat.messages(0).role(), "system");
  EXPECT_EQ(chat.messages(1).content(), "Hi there");
  EXPECT_EQ(chat.messages(2).role(), "assistant");
  EXPECT_EQ(chat.template_kwargs().at("thinking"), "true");
  // max_completion_tokens wins over the deprecated max_tokens.
  EXPECT_EQ(r.calls[0].stop().max_new_tokens(), 9u);
}

TEST(OpenAiRequestTest, ChatRefusals) {
  EXPECT_EQ(Refusal(kChat, R"({"messages": []})").second, "messages");
  EXPECT_EQ(Refusal(kChat, R"({"messages": [{"role": "tool", "content": "x"}]})").second,
            "messages");
  EXPECT_EQ(Refusal(kChat, R"({"messages": [{"content": "x"}]})").second, "messages");
  EXPECT_EQ(
      Refusal(kChat, R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})")
          .second,
      "messages");
  EXPECT_EQ(Refusal(kChat, R"({"messages": [{"role": "user", "content": 5}]})").second, "messages");
  const char* base = R"({"messages": [{"role": "user", "content": "x"}], )";
  for (const char* field :
       {R"("tools": [{"type": "function"}])", R"("tool_choice": "auto")", R"("functions": [{}])",
        R"("audio": {"voice": "x"})", R"("reasoning_effort": "high")"}) {
    const std::string body = std::string(base) + field + "}";
    const std::string name = std::string(field).substr(1, std::string(field).find('"', 1) - 1);
    EXPECT_EQ(Refusal(kChat, body.c_str()), std::make_pair(400, name)) << body;
  }
  EXPECT_EQ(
      Refusal(kChat, (std::string(base) + R"("modalities": ["text", "audio"]})").c_str()).second,
      "modalities");
  EXPECT_EQ(Refusal(kChat, (std::string(base) + R"("store": true})").c_str()).second, "store");
  EXPECT_EQ(
      Refusal(kChat, (std::string(base) + R"("chat_template_kwargs": {"a": 1}})").c_str()).second,
      "chat_template_kwargs");
  EXPECT_EQ(Refusal(kChat, (std::string(base) + R"("tools": []})").c_str()).first, 200);
}

TEST(OpenAiRequestTest, StreamOptions) {
  OpenAiRequest r = Parse(kCompletions,
                          R"({"prompt": "x", "stream": true,
                              "stream_options": {"include_usage": true}})");
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  EXPECT_EQ(
      Refusal(kCompletions, R"({"prompt": "x", "stream_options": {"include_usage": true}})").second,
      "stream_options");
  EXPECT_EQ(Refusal(kCompletions, R"({"prompt": "x", "stream": "yes"})").second, "stream");
}

TEST(OpenAiRequestTest, SamplesBeyondTheAdvertisedMaximumAreRefused) {
  EXPECT_EQ(Refusal(kCompletions, R"({"prompt": "x", "n": 2})"),
            std::make_pair(400, std::string("n")));
  EXPECT_EQ(Refusal(kCompletions, R"({"prompt": "x", "n": 0})").second, "n");
  EXPECT_EQ(Refusal(kCompletions, R"({"prompt": "x", "best_of": 3})").second, "best_of");
  ServedModel more = Served();
  more.max_num_samples = 4;
  const OpenAiRequest r = Parse(kChat, R"({"messages": [{"role": "user", "content": "x"}],
                                           "n": 3})",
                                more);
  EXPECT_EQ(r.n, 3u);
  EXPECT_EQ(r.calls[0].sampling().num_samples(), 3u);
}

TEST(OpenAiRequestTest, LogprobsFollowTheServersLimit) {
  // This server returns no logprobs: any request for them is a clear 400.
  EXPECT_EQ(Refusal(kCompletions, R"({"prompt": "x", "logprobs": 2})"),
            std::make_pair(400, std::string("logprobs")));
  EXPECT_EQ(Refusal(kCompletions, R"({"prompt": "x", "logprobs": 0})").second, "logprobs");
  EXPECT_EQ(Refusal(kChat, R"({"messages": [{"role": "user", "content": "x"}], "logprobs": true})")
                .second,
            "logprobs");
  EXPECT_EQ(Refusal(kChat, R"({"messages": [{"role": "user", "content": "x"}],
                               "logprobs": true, "top_logprobs": 3})")
                .second,
            "top_logprobs");
  EXPECT_EQ(Refusal(kChat, R"({"messages": [{"role": "user", "content": "x"}],
                               "top_logprobs": 3})")
                .second,
            "top_logprobs");
  EXPECT_EQ(Parse(kChat, R"({"messages": [{"role": "user", "content": "x"}], "logprobs": false})")
                .logprobs,
            std::nullopt);
  ServedModel with = Served();
  with.max_top_logprobs = 5;
  OpenAiRequest r = Parse(kCompletions, R"({"prompt": "x", "logprobs": 3})", with);
  EXPECT_EQ(r.logprobs, 3u);
  EXPECT_EQ(r.calls[0].output().top_logprobs(), 3u);
  // Only the chosen token: the engine still counts it as one alternative.
  r = Parse(kChat, R"({"messages": [{"role": "user", "content": "x"}], "logprobs": true})", with);
  EXPECT_EQ(r.logprobs, 0u);
  EXPECT_EQ(r.calls[0].output().top_logprobs(), 1u);
  EXPECT_EQ(Refusal(kCompletions, R"({"prompt": "x", "logprobs": 6})", with).second, "logprobs");
}

TEST(OpenAiRequestTest, Echo) {
  OpenAiRequest r = Parse(kCompletions, R"({"prompt": ["ab", "cd"], "echo": true})");
  EXPECT_EQ(r.echo, (std::vector<std::string>{"ab", "cd"}));
  EXPECT_EQ(Refusal(kCompletions, R"({"prompt": [1, 2], "echo": true})").second, "echo");
  ServedModel with = Served();
  with.max_top_logprobs = 5;
  // Prompt logprobs are not advertised.
  EXPECT_EQ(Refusal(kCompletions, R"({"prompt": "x", "echo": true, "logprobs": 1})", with).second,
            "echo");
  with.prompt_logprobs = true;
  r = Parse(kCompletions, R"({"prompt": "x", "echo": true, "logprobs": 1})", with);
  EXPECT_EQ(r.calls[0].output().prompt_logprobs(), 1u);
}

TEST(OpenAiRequestTest, ResponseFormatAndGuidedDecoding) {
  const char* base = R"({"messages": [{"role": "user", "content": "x"}], )";
  auto parse = [&](const char* tail) {
    return Parse(kChat, (std::string(base) + tail + "}").c_str()).calls[0].constraint();
  };
  EXPECT_TRUE(parse(R"("response_format": {"type": "json_object"})").json_object());
  const v1::StructuredOutput schema = parse(R"("response_format": {"type": "json_schema",
      "json_schema": {"name": "p", "strict": true, "schema": {"type": "object"}}})");
  EXPECT_EQ(Json::parse(schema.json_schema()), Json::parse(R"({"type": "object"})"));
  EXPECT_TRUE(schema.strict());
  EXPECT_EQ(parse(R"("response_format": {"type": "text"})").kind_case(),
            v1::StructuredOutput::KIND_NOT_SET);
  EXPECT_EQ(parse(R"("guided_regex": "[0-9]+")").regex(), "[0-9]+");
  EXPECT_EQ(parse(R"("guided_grammar": "root ::= \"a\"")").ebnf(), "root ::= \"a\"");
  EXPECT_EQ(parse(R"("guided_choice": ["yes", "no"])").choice().choices_size(), 2);
  EXPECT_EQ(Json::parse(parse(R"("guided_json": {"type": "string"})").json_schema()),
            Json::parse(R"({"type": "string"})"));

  auto refusal = [&](const char* tail) {
    return Refusal(kChat, (std::string(base) + tail + "}").c_str()).second;
  };
  EXPECT_EQ(refusal(R"("response_format": {"type": "yaml"})"), "response_format");
  EXPECT_EQ(refusal(R"("response_format": {"type": "json_schema"})"), "response_format");
  EXPECT_EQ(refusal(R"("response_format": {"type": "json_schema", "json_schema": {"schema": 3}})"),
            "response_format");
  EXPECT_EQ(refusal(R"("response_format": "json")"), "response_format");
  EXPECT_EQ(refusal(R"("response_format": {"type": "json_object"}, "guided_regex": "a")"),
            "guided_regex");
  ServedModel plain = Served();
  plain.structured_output_kinds.clear();
  EXPECT_EQ(
      Refusal(kChat, (std::string(base) + R"("response_format": {"type": "json_object"}})").c_str(),
              plain)
          .second,
      "response_format");
}

TEST(OpenAiRequestTest, BadValuesNameTheirParameter) {
  struct Case {
    const char* body;
    const char* param;
  };
  const Case cases[] = {
      {R"({"prompt": "x", "max_tokens": 0})", "max_tokens"},
      {R"({"prompt": "x", "max_tokens": 4097})", "max_tokens"},
      {R"({"prompt": "x", "max_tokens": "5"})", "max_tokens"},
      {R"({"prompt": "x", "max_tokens": 1.5})", "max_tokens"},
      {R"({"prompt": "x", "temperature": "hot"})", "temperature"},
      {R"({"prompt": "x", "top_p": []})", "top_p"},
      {R"({"prompt": "x", "top_k": -2})", "top_k"},
      {R"({"prompt": "x", "seed": 1.5})", "seed"},
      {R"({"prompt": "x", "stop": 5})", "stop"},
      {R"({"prompt": "x", "stop": [""]})", "stop"},
      {R"({"prompt": "x", "stop": ["a", "b", "c", "d", "e"]})", "stop"},
      {R"({"prompt": "x", "stop_token_ids": [-1]})", "stop_token_ids"},
      {R"({"prompt": "x", "logit_bias": {"x": 1}})", "logit_bias"},
      {R"({"prompt": "x", "logit_bias": {"1": 101}})", "logit_bias"},
      {R"({"prompt": "x", "logit_bias": {"1": 1, "2": 2, "3": 3}})", "logit_bias"},
      {R"({"prompt": "x", "logit_bias": [1]})", "logit_bias"},
      {R"({"prompt": "x", "min_tokens": -1})", "min_tokens"},
      {R"({"prompt": "x", "ignore_eos": 1})", "ignore_eos"},
      {R"({"prompt": "x", "suffix": "tail"})", "suffix"},
      {R"({"prompt": "x", "priority": 1e3})", "priority"},
      {R"({"prompt": "x", "model": 3})", "model"},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(Refusal(kCompletions, c.body), std::make_pair(400, std::string(c.param))) << c.body;
  }
  EXPECT_EQ(Refusal(kCompletions, R"({"prompt": "x", "model": "gpt-4"})"),
            std::make_pair(404, std::string("model")));
  EXPECT_EQ(Refusal(kCompletions, R"([1, 2])"), std::make_pair(400, std::string()));
}

TEST(OpenAiRequestTest, SpecialValues) {
  const OpenAiRequest r = Parse(kCompletions, R"({"prompt": "x", "top_k": -1, "seed": -1,
                                                  "stop": "\n", "temperature": null})");
  EXPECT_FALSE(r.calls[0].sampling().has_top_k());
  EXPECT_EQ(r.calls[0].sampling().seed(), UINT64_MAX);
  EXPECT_EQ(r.calls[0].stop().stop_strings(0), "\n");
  EXPECT_FALSE(r.calls[0].sampling().has_temperature());
}

}  // namespace
}  // namespace weir::coordinator::http
