// coordinator/http/openai_request.h
//
// Translation of OpenAI-style JSON requests (/v1/completions,
// /v1/chat/completions) into the public API's GenerateRequest, the message
// the gRPC Generate handler validates and runs. Every field the OpenAI API
// defines is either mapped or refused with INVALID_ARGUMENT naming it (never
// silently ignored), except `user`, `metadata`, `service_tier`, `store=false`
// and `parallel_tool_calls`, which carry no generation semantics. Fields
// unknown to the OpenAI API are ignored, as OpenAI-compatible servers do.
//
// Mapping (OpenAI -> GenerateRequest):
//   prompt (string | [string] | [int] | [[int]])   -> text / tokens, one call each
//   messages                   -> chat (the DeepSeek chat template)
//   chat_template_kwargs       -> chat.template_kwargs ("thinking", ...)
//   max_tokens, max_completion_tokens -> stop.max_new_tokens (completions: 16 if unset)
//   stop (string | [string])   -> stop.stop_strings
//   n                          -> sampling.num_samples (<= the advertised maximum)
//   temperature, top_p, top_k (-1 = off), min_p, seed,
//   presence_penalty, frequency_penalty, repetition_penalty -> sampling.*
//   logit_bias {"id": bias}    -> sampling.logit_bias ([-100, 100])
//   logprobs, top_logprobs     -> output.top_logprobs (<= the advertised maximum)
//   response_format json_object / json_schema -> constraint
//   guided_json, guided_regex, guided_choice, guided_grammar -> constraint
//   min_tokens, ignore_eos, stop_token_ids, include_stop_str_in_output,
//   skip_special_tokens (default true), priority -> stop.*, output.*, priority
//   echo (completions, text prompts) -> the prompt is prepended to the text
//
// A bad field is INVALID_ARGUMENT whose payload names the OpenAI parameter
// (ParamOf); an unknown model is NOT_FOUND naming "model".
//
// Thread safety: pure functions.

#ifndef WEIR_COORDINATOR_HTTP_OPENAI_REQUEST_H_
#define WEIR_COORDINATOR_HTTP_OPENAI_REQUEST_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "proto/inference.pb.h"

namespace weir::coordinator::http {

using Json = nlohmann::json;

// What the server advertises (GetModelInfo) that translation must honour.
struct ServedModel {
  std::string name;
  uint32_t max_context_tokens = 0;
  uint32_t max_new_tokens_limit = 0;
  uint32_t max_num_samples = 1;
  uint32_t max_top_logprobs = 0;
  bool prompt_logprobs = false;
  uint32_t max_stop_sequences = 16;
  uint32_t max_logit_bias_entries = 1024;
  std::vector<std::string> structured_output_kinds;
  // Prompts one /v1/completions request may carry (one Generate call each).
  uint32_t max_prompts = 64;

  static ServedModel FromModelInfo(const v1::ModelInfo& info);
};

enum class Endpoint { kCompletions, kChatCompletions };

struct OpenAiRequest {
  Endpoint endpoint = Endpoint::kCompletions;
  // One Generate call per prompt (chat: exactly one); each asks for `n`
  // samples. Choice index = call * n + sample_index.
  std::vector<v1::GenerateRequest> calls;
  uint32_t n = 1;
  bool stream = false;
  // stream_options.include_usage: a last chunk with the usage.
  bool include_usage = false;
  // Completions with echo: per call, the prompt text to put before the output.
  std::vector<std::string> echo;
  // Logprob alternatives to return per token; nullopt = no logprobs (0 =
  // only the chosen token's).
  std::optional<uint32_t> logprobs;
};

// Translates `body`. Errors: INVALID_ARGUMENT with ParamOf = the offending
// parameter; NOT_FOUND for a model other than `served.name`.
absl::StatusOr<OpenAiRequest> ParseOpenAiRequest(Endpoint endpoint, const Json& body,
                                                 const ServedModel& served);

// INVALID_ARGUMENT("<message>") carrying `param` (see ParamOf).
absl::Status InvalidParam(std::string_view param, std::string_view message);
// The OpenAI parameter a translation error names; empty if none.
std::string ParamOf(const absl::Status& status);

}  // namespace weir::coordinator::http

#endif  // WEIR_COORDINATOR_HTTP_OPENAI_REQUEST_H_
