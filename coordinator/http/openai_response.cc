#include "coordinator/http/openai_response.h"

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace weir::coordinator::http {
namespace {

// Engine field paths (BuildRequest's "field: why") -> OpenAI parameters.
// "" = the input parameter (prompt or messages).
struct FieldParam {
  const char* field;
  const char* param;
};
constexpr FieldParam kFieldParams[] = {
    {"sampling.temperature", "temperature"},
    {"sampling.top_p", "top_p"},
    {"sampling.top_k", "top_k"},
    {"sampling.min_p", "min_p"},
    {"sampling.repetition_penalty", "repetition_penalty"},
    {"sampling.frequency_penalty", "frequency_penalty"},
    {"sampling.presence_penalty", "presence_penalty"},
    {"sampling.logit_bias", "logit_bias"},
    {"sampling.num_samples", "n"},
    {"stop.max_new_tokens", "max_tokens"},
    {"stop.min_new_tokens", "min_tokens"},
    {"stop.stop_strings", "stop"},
    {"stop.stop_token_ids", "stop_token_ids"},
    {"stop", "stop"},
    {"constraint", "response_format"},
    {"output.top_logprobs", "logprobs"},
    {"output.prompt_logprobs", "echo"},
    {"tokens.ids", ""},
    {"input", ""},
    {"PROMPT_TOO_LONG", ""},
};

std::string InputParam(Endpoint endpoint) {
  return endpoint == Endpoint::kCompletions ? "prompt" : "messages";
}

// For an engine INVALID_ARGUMENT: the OpenAI parameter and the message with
// the engine's field path replaced by it.
void NameEngineParam(Endpoint endpoint, ApiError& error) {
  const std::string& message = error.message;
  if (absl::StartsWith(message, "template kwarg")) {
    error.param = "chat_template_kwargs";
    return;
  }
  if (absl::StartsWith(message, "chat ") || absl::StartsWith(message, "unsupported chat role")) {
    error.param = "messages";
    return;
  }
  const size_t colon = message.find(": ");
  if (colon == std::string::npos) return;
  const std::string field = message.substr(0, colon);
  for (const FieldParam& f : kFieldParams) {
    if (field != f.field) continue;
    error.param = *f.param == '\0' ? InputParam(endpoint) : f.param;
    if (field == "PROMPT_TOO_LONG") {
      error.code = "context_length_exceeded";
      error.message =
          "The prompt is too long for the model's context: " + message.substr(colon + 2);
    } else {
      error.message = error.param + message.substr(colon);
    }
    return;
  }
}

}  // namespace

ApiError ToApiError(const absl::Status& status, Endpoint endpoint) {
  ApiError error;
  error.message = std::string(status.message());
  error.param = ParamOf(status);
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kOutOfRange:
      error.http_status = 400;
      error.type = "invalid_request_error";
      if (error.param.empty() && status.code() == absl::StatusCode::kInvalidArgument) {
        NameEngineParam(endpoint, error);
      }
      break;
    case absl::StatusCode::kUnauthenticated:
      error.http_status = 401;
      error.type = "authentication_error";
      error.code = "invalid_api_key";
      break;
    case absl::StatusCode::kPermissionDenied:
      error.http_status = 403;
      error.type = "permission_error";
      break;
    case absl::StatusCode::kNotFound:
      error.http_status = 404;
      error.type = "invalid_request_error";
      error.code = error.param == "model" ? "model_not_found" : "not_found";
      if (absl::StartsWith(error.message, "unknown model")) {
        error.param = "model";
        error.code = "model_not_found";
      }
      break;
    case absl::StatusCode::kAlreadyExists:
      error.http_status = 409;
      error.type = "invalid_request_error";
      error.code = "conflict";
      break;
    case absl::StatusCode::kResourceExhausted:
      error.http_status = 429;
      error.type = "rate_limit_error";
      error.code = "rate_limit_exceeded";
      break;
    case absl::StatusCode::kUnimplemented:
      error.http_status = 501;
      error.type = "invalid_request_error";
      error.code = "not_implemented";
      break;
    case absl::StatusCode::kUnavailable:
      error.http_status = 503;
      error.type = "server_error";
      error.code = "service_unavailable";
      break;
    case absl::StatusCode::kDeadlineExceeded:
      error.http_status = 504;
      error.type = "server_error";
      error.code = "timeout";
      break;
    case absl::StatusCode::kCancelled:
      // nginx's "client closed request": nobody reads it.
      error.http_status = 499;
      error.type = "server_error";
      error.code = "cancelled";
      break;
    default:
      error.http_status = 500;
      error.type = "server_error";
      error.code = "internal_error";
      break;
  }
  return error;
}

ApiError ToApiError(const grpc::Status& status, Endpoint endpoint) {
  return ToApiError(
      absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message()),
      endpoint);
}

Json ErrorBody(const ApiError& error) {
  Json inner = {{"message", error.message}, {"type", error.type}};
  inner["param"] = error.param.empty() ? Json(nullptr) : Json(error.param);
  inner["code"] = error.code.empty() ? Json(nullptr) : Json(error.code);
  return Json{{"error", std::move(inner)}};
}

std::string Dump(const Json& value) {
  return value.dump(-1, ' ', false, Json::error_handler_t::replace);
}

Json FinishReasonJson(v1::FinishReason reason) {
  switch (reason) {
    case v1::FINISH_REASON_EOS:
    case v1::FINISH_REASON_STOP_SEQUENCE:
    case v1::FINISH_REASON_STOP_TOKEN:
    case v1::FINISH_REASON_GRAMMAR_TERMINATED:
      return "stop";
    case v1::FINISH_REASON_MAX_TOKENS:
    case v1::FINISH_REASON_CONTEXT_LIMIT:
      return "length";
    case v1::FINISH_REASON_CANCELLED:
    case v1::FINISH_REASON_DEADLINE:
    case v1::FINISH_REASON_ERROR:
      return "abort";
    default:
      return nullptr;
  }
}

ResponseBuilder::ResponseBuilder(const OpenAiRequest& request, std::string id, int64_t created,
                                 std::string model, TokenBytes token_bytes)
    : request_(request),
      id_(std::move(id)),
      created_(created),
      model_(std::move(model)),
      token_bytes_(std::move(token_bytes)),
      choices_(request.calls.size() * request.n),
      prompt_tokens_(request.calls.size(), 0) {
  for (Choice& c : choices_) {
    if (!request_.logprobs.has_value()) continue;
    c.logprobs = chat() ? Json{{"content", Json::array()}}
                        : Json{{"tokens", Json::array()},
                               {"token_logprobs", Json::array()},
                               {"top_logprobs", Json::array()},
                               {"text_offset", Json::array()}};
  }
}

std::string ResponseBuilder::TokenText(uint32_t id) const {
  return token_bytes_ ? token_bytes_(id) : std::string();
}

Json ResponseBuilder::AppendLogprobs(
    const google::protobuf::RepeatedPtrField<v1::TokenLogprobs>& entries, bool prompt,
    Choice& choice) const {
  const uint32_t k = request_.logprobs.value_or(0);
  if (chat()) {
    Json increment = Json::array();
    auto bytes_of = [](const std::string& s) {
      Json out = Json::array();
      for (unsigned char b : s) out.push_back(static_cast<int>(b));
      return out;
    };
    for (const v1::TokenLogprobs& e : entries) {
      const std::string token = TokenText(e.token_id());
      Json top = Json::array();
      for (int i = 0; i < e.top_size() && static_cast<uint32_t>(i) < k; ++i) {
        const std::string alt = TokenText(e.top(i).token_id());
        top.push_back({{"token", alt}, {"logprob", e.top(i).logprob()}, {"bytes", bytes_of(alt)}});
      }
      Json item = {{"token", token},
                   {"logprob", e.logprob()},
                   {"bytes", bytes_of(token)},
                   {"top_logprobs", std::move(top)}};
      choice.logprobs["content"].push_back(item);
      increment.push_back(std::move(item));
    }
    return Json{{"content", std::move(increment)}};
  }
  Json increment = {{"tokens", Json::array()},
                    {"token_logprobs", Json::array()},
                    {"top_logprobs", Json::array()},
                    {"text_offset", Json::array()}};
  for (int j = 0; j < entries.size(); ++j) {
    const v1::TokenLogprobs& e = entries[j];
    const std::string token = TokenText(e.token_id());
    Json top = Json::object();
    for (int i = 0; i < e.top_size() && static_cast<uint32_t>(i) < k; ++i) {
      top[TokenText(e.top(i).token_id())] = e.top(i).logprob();
    }
    // The first prompt token has no logprob (nothing precedes it).
    const bool first_of_prompt = prompt && j == 0 && choice.text_offset == 0;
    increment["tokens"].push_back(token);
    increment["token_logprobs"].push_back(first_of_prompt ? Json(nullptr) : Json(e.logprob()));
    increment["top_logprobs"].push_back(first_of_prompt ? Json(nullptr) : std::move(top));
    increment["text_offset"].push_back(choice.text_offset);
    choice.text_offset += token.size();
  }
  for (const char* key : {"tokens", "token_logprobs", "top_logprobs", "text_offset"}) {
    for (const Json& v : increment[key]) choice.logprobs[key].push_back(v);
  }
  return increment;
}

Json ResponseBuilder::Chunk(Json choices) const {
  Json chunk = {{"id", id_},
                {"object", chat() ? "chat.completion.chunk" : "text_completion"},
                {"created", created_},
                {"model", model_},
                {"choices", std::move(choices)}};
  if (request_.include_usage) chunk["usage"] = nullptr;
  return chunk;
}

Json ResponseBuilder::Usage() const {
  uint64_t prompt = 0;
  for (uint64_t p : prompt_tokens_) prompt += p;
  // Speculative decoding: the completion tokens that were accepted drafts,
  // and the drafts verification rejected, in OpenAI's fields for accepted
  // and rejected predicted tokens (0 with it off).
  return Json{{"prompt_tokens", prompt},
              {"completion_tokens", completion_tokens_},
              {"total_tokens", prompt + completion_tokens_},
              {"completion_tokens_details",
               {{"accepted_prediction_tokens", accepted_draft_tokens_},
                {"rejected_prediction_tokens", rejected_draft_tokens_}}}};
}

void ResponseBuilder::OnEvent(size_t call, const v1::GenerateEvent& event, std::string* sse) {
  if (call >= request_.calls.size()) return;
  auto emit = [&](Json choice) {
    if (sse != nullptr) {
      absl::StrAppend(sse, "data: ", Dump(Chunk(Json::array({std::move(choice)}))), "\n\n");
    }
  };
  const size_t n = request_.n;
  if (event.has_accepted()) {
    prompt_tokens_[call] = event.accepted().prompt_tokens();
    for (size_t s = 0; s < n; ++s) {
      const size_t index = call * n + s;
      if (chat()) {
        emit({{"index", index},
              {"delta", {{"role", "assistant"}, {"content", ""}}},
              {"logprobs", nullptr},
              {"finish_reason", nullptr}});
      } else if (!request_.echo.empty()) {
        choices_[index].text = request_.echo[call];
        emit({{"index", index},
              {"text", request_.echo[call]},
              {"logprobs", nullptr},
              {"finish_reason", nullptr}});
      }
    }
    return;
  }
  if (event.has_delta()) {
    const v1::GenerateEvent::Delta& delta = event.delta();
    const size_t index = call * n + delta.sample_index();
    if (delta.sample_index() >= n) return;
    Choice& choice = choices_[index];
    Json increment = nullptr;
    if (request_.logprobs.has_value()) {
      if (delta.has_prompt_logprobs() && !request_.echo.empty() && !chat()) {
        increment = AppendLogprobs(delta.prompt_logprobs().tokens(), /*prompt=*/true, choice);
      }
      if (delta.logprobs_size() > 0) {
        Json more = AppendLogprobs(delta.logprobs(), /*prompt=*/false, choice);
        if (increment.is_null()) {
          increment = std::move(more);
        } else {
          for (auto& [key, values] : more.items()) {
            for (const Json& v : values) increment[key].push_back(v);
          }
        }
      }
    }
    choice.text += delta.text();
    if (delta.text().empty() && increment.is_null()) return;
    if (chat()) {
      emit({{"index", index},
            {"delta", {{"content", delta.text()}}},
            {"logprobs", increment},
            {"finish_reason", nullptr}});
    } else {
      emit({{"index", index},
            {"text", delta.text()},
            {"logprobs", increment},
            {"finish_reason", nullptr}});
    }
    return;
  }
  if (event.has_final()) {
    const v1::GenerateEvent::Final& final_event = event.final();
    if (final_event.sample_index() >= n) return;
    const size_t index = call * n + final_event.sample_index();
    Choice& choice = choices_[index];
    choice.finish_reason = FinishReasonJson(final_event.reason());
    if (final_event.has_stop_text()) {
      choice.stop_reason = final_event.stop_text();
    } else if (final_event.has_stop_token_id()) {
      choice.stop_reason = final_event.stop_token_id();
    }
    completion_tokens_ += final_event.usage().completion_tokens();
    accepted_draft_tokens_ += final_event.usage().accepted_draft_tokens();
    rejected_draft_tokens_ += final_event.usage().rejected_draft_tokens();
    if (final_event.usage().prompt_tokens() > 0) {
      prompt_tokens_[call] = final_event.usage().prompt_tokens();
    }
    Json out = {{"index", index}};
    if (chat()) {
      out["delta"] = Json::object();
    } else {
      out["text"] = "";
    }
    out["logprobs"] = nullptr;
    out["finish_reason"] = choice.finish_reason;
    out["stop_reason"] = choice.stop_reason;
    emit(std::move(out));
  }
}

std::string ResponseBuilder::StreamTail() const {
  std::string out;
  if (request_.include_usage) {
    Json chunk = Chunk(Json::array());
    chunk["usage"] = Usage();
    absl::StrAppend(&out, "data: ", Dump(chunk), "\n\n");
  }
  out += "data: [DONE]\n\n";
  return out;
}

std::string ResponseBuilder::StreamError(const ApiError& error) {
  return absl::StrCat("data: ", Dump(ErrorBody(error)), "\n\ndata: [DONE]\n\n");
}

Json ResponseBuilder::Response() const {
  Json choices = Json::array();
  for (size_t i = 0; i < choices_.size(); ++i) {
    const Choice& c = choices_[i];
    Json choice = {{"index", i}};
    if (chat()) {
      choice["message"] = {{"role", "assistant"}, {"content", c.text}};
    } else {
      choice["text"] = c.text;
    }
    choice["logprobs"] = c.logprobs;
    choice["finish_reason"] = c.finish_reason;
    choice["stop_reason"] = c.stop_reason;
    choices.push_back(std::move(choice));
  }
  return Json{{"id", id_},
              {"object", chat() ? "chat.completion" : "text_completion"},
              {"created", created_},
              {"model", model_},
              {"choices", std::move(choices)},
              {"usage", Usage()}};
}

}  // namespace weir::coordinator::http
