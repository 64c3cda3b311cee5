// coordinator/http/openai_response.h
//
// The OpenAI side of a response: errors (the OpenAI error JSON and the HTTP
// status for a gRPC/absl status), and ResponseBuilder, which turns the
// GenerateEvents of a request's Generate calls into either server-sent-event
// chunks (stream) or one JSON response.
//
// Finish reasons: EOS, stop sequence, stop token and a terminated grammar ->
// "stop"; max tokens and the context limit -> "length"; cancelled and
// deadline -> "abort" (vLLM's value). `stop_reason` (vLLM's extension) names
// the matched stop string or token id.
//
// Thread safety: ToApiError and ErrorBody are pure; a ResponseBuilder is used
// by one thread.

#ifndef WEIR_COORDINATOR_HTTP_OPENAI_RESPONSE_H_
#define WEIR_COORDINATOR_HTTP_OPENAI_RESPONSE_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "coordinator/http/openai_request.h"
#include "grpcpp/support/status.h"
#include "proto/inference.pb.h"

namespace weir::coordinator::http {

struct ApiError {
  int http_status = 500;
  std::string type;
  std::string message;
  std::string param;  // empty: null
  std::string code;   // empty: null
};

// Maps a status to the OpenAI error: INVALID_ARGUMENT, FAILED_PRECONDITION and
// OUT_OF_RANGE -> 400 (the param from the translation's payload, or from the
// engine's "field.path: ..." message), UNAUTHENTICATED -> 401,
// PERMISSION_DENIED -> 403, NOT_FOUND -> 404, ALREADY_EXISTS -> 409,
// RESOURCE_EXHAUSTED -> 429, UNIMPLEMENTED -> 501, UNAVAILABLE -> 503,
// DEADLINE_EXCEEDED -> 504, others -> 500. `endpoint` picks the name of the
// input parameter ("prompt" or "messages").
ApiError ToApiError(const absl::Status& status, Endpoint endpoint);
ApiError ToApiError(const grpc::Status& status, Endpoint endpoint);

// {"error": {"message", "type", "param", "code"}}.
Json ErrorBody(const ApiError& error);

// Serializes `value` (invalid UTF-8 is replaced, never thrown on).
std::string Dump(const Json& value);

// The OpenAI finish reason of `reason` (null for UNSPECIFIED).
Json FinishReasonJson(v1::FinishReason reason);

// Returns the bytes token `id` decodes to (may be a partial UTF-8 sequence).
using TokenBytes = std::function<std::string(uint32_t id)>;

class ResponseBuilder {
 public:
  // `request` must outlive the builder. `id` is the response id
  // ("cmpl-..." / "chatcmpl-..."), `created` Unix seconds. `token_bytes` may
  // be null (logprob tokens are then empty strings).
  ResponseBuilder(const OpenAiRequest& request, std::string id, int64_t created, std::string model,
                  TokenBytes token_bytes);

  // Applies one event of call `call`. When streaming, appends the SSE
  // messages it produces ("data: {...}\n\n") to `sse`.
  void OnEvent(size_t call, const v1::GenerateEvent& event, std::string* sse);

  // Streaming: the usage chunk (with include_usage) and "data: [DONE]".
  std::string StreamTail() const;
  // Streaming: an error event after the stream started, then [DONE].
  static std::string StreamError(const ApiError& error);

  // Non-streaming: the whole response.
  Json Response() const;

 private:
  struct Choice {
    std::string text;
    Json finish_reason;  // null until the sample's Final
    Json stop_reason;
    // Completions: {tokens, token_logprobs, top_logprobs, text_offset};
    // chat: {content: [...]}. Null without logprobs.
    Json logprobs;
    size_t text_offset = 0;
  };

  bool chat() const { return request_.endpoint == Endpoint::kChatCompletions; }
  Json Chunk(Json choices) const;
  Json Usage() const;
  // Logprob entries for `entries` (appended to `choice.logprobs`); returns
  // the increment (same shape) for a streamed chunk.
  Json AppendLogprobs(const google::protobuf::RepeatedPtrField<v1::TokenLogprobs>& entries,
                      bool prompt, Choice& choice) const;
  std::string TokenText(uint32_t id) const;

  const OpenAiRequest& request_;
  const std::string id_;
  const int64_t created_;
  const std::string model_;
  const TokenBytes token_bytes_;
  std::vector<Choice> choices_;
  std::vector<uint64_t> prompt_tokens_;  // per call
  uint64_t completion_tokens_ = 0;
  uint64_t accepted_draft_tokens_ = 0;  // Usage.accepted_draft_tokens, summed
  uint64_t rejected_draft_tokens_ = 0;  // Usage.rejected_draft_tokens, summed
};

}  // namespace weir::coordinator::http

#endif  // WEIR_COORDINATOR_HTTP_OPENAI_RESPONSE_H_
