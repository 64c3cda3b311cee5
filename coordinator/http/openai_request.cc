#include "coordinator/http/openai_request.h"

#include <cmath>
#include <limits>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace weir::coordinator::http {
namespace {

constexpr char kParamPayload[] = "weir.openai/param";
// OpenAI's own default for /v1/completions.
constexpr uint32_t kCompletionsDefaultMaxTokens = 16;

// The field `key` of `body`, or null when it is absent or JSON null.
const Json* Field(const Json& body, const char* key) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return nullptr;
  return &*it;
}

absl::Status GetBool(const Json& body, const char* key, std::optional<bool>& out) {
  const Json* v = Field(body, key);
  if (v == nullptr) return absl::OkStatus();
  if (!v->is_boolean()) return InvalidParam(key, "must be a boolean");
  out = v->get<bool>();
  return absl::OkStatus();
}

absl::Status GetNumber(const Json& body, const char* key, std::optional<double>& out) {
  const Json* v = Field(body, key);
  if (v == nullptr) return absl::OkStatus();
  if (!v->is_number()) return InvalidParam(key, "must be a number");
  const double d = v->get<double>();
  if (!std::isfinite(d)) return InvalidParam(key, "must be finite");
  out = d;
  return absl::OkStatus();
}

absl::Status GetInt(const Json& body, const char* key, int64_t lo, int64_t hi,
                    std::optional<int64_t>& out) {
  const Json* v = Field(body, key);
  if (v == nullptr) return absl::OkStatus();
  if (!v->is_number_integer()) return InvalidParam(key, "must be an integer");
  if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(hi)) {
    return InvalidParam(key, absl::StrCat("must be in [", lo, ", ", hi, "]"));
  }
  const int64_t i = v->get<int64_t>();
  if (i < lo || i > hi) return InvalidParam(key, absl::StrCat("must be in [", lo, ", ", hi, "]"));
  out = i;
  return absl::OkStatus();
}

absl::Status GetString(const Json& body, const char* key, std::optional<std::string>& out) {
  const Json* v = Field(body, key);
  if (v == nullptr) return absl::OkStatus();
  if (!v->is_string()) return InvalidParam(key, "must be a string");
  out = v->get<std::string>();
  return absl::OkStatus();
}

// Fields of the OpenAI API this server does not implement: refused when set.
absl::Status RefuseUnsupported(Endpoint endpoint, const Json& body) {
  static const char* const kCompletions[] = {"suffix"};
  static const char* const kChat[] = {
      "tools", "tool_choice", "functions",          "function_call",
      "audio", "prediction",  "web_search_options", "reasoning_effort"};
  auto refuse = [&](const char* key) -> absl::Status {
    const Json* v = Field(body, key);
    if (v == nullptr) return absl::OkStatus();
    if (v->is_string() && v->get<std::string>().empty()) return absl::OkStatus();
    if (v->is_array() && v->empty()) return absl::OkStatus();
    return InvalidParam(key, std::string("is not supported by this server") +
                                 (std::string(key) == "reasoning_effort"
                                      ? "; use chat_template_kwargs {\"thinking\": true}"
                                      : ""));
  };
  if (endpoint == Endpoint::kCompletions) {
    for (const char* key : kCompletions) RETURN_IF_ERROR(refuse(key));
  } else {
    for (const char* key : kChat) RETURN_IF_ERROR(refuse(key));
    if (const Json* m = Field(body, "modalities"); m != nullptr) {
      if (!m->is_array() || m->size() != 1 || *m != Json::array({"text"})) {
        return InvalidParam("modalities", "only [\"text\"] is supported");
      }
    }
    std::optional<bool> store;
    RETURN_IF_ERROR(GetBool(body, "store", store));
    if (store.value_or(false)) return InvalidParam("store", "stored completions are not supported");
  }
  return absl::OkStatus();
}

// Completions prompts: one input per Generate call.
absl::Status ParsePrompts(const Json& body, const ServedModel& served,
                          std::vector<v1::GenerateRequest>& calls) {
  const Json* prompt = Field(body, "prompt");
  if (prompt == nullptr) return InvalidParam("prompt", "is required");
  auto token_ids = [](const Json& list, v1::GenerateRequest& call) -> absl::Status {
    if (list.empty()) return InvalidParam("prompt", "a token list is empty");
    for (const Json& id : list) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 ||
          id.get<int64_t>() > std::numeric_limits<uint32_t>::max()) {
        return InvalidParam("prompt", "token ids must be integers in [0, 2^32)");
      }
      call.mutable_tokens()->add_ids(static_cast<uint32_t>(id.get<int64_t>()));
    }
    return absl::OkStatus();
  };
  if (prompt->is_string()) {
    calls.emplace_back().set_text(prompt->get<std::string>());
    return absl::OkStatus();
  }
  if (!prompt->is_array() || prompt->empty()) {
    return InvalidParam("prompt",
                        "must be a string, a list of strings, a list of token ids or "
                        "a list of token-id lists");
  }
  if ((*prompt)[0].is_number()) return token_ids(*prompt, calls.emplace_back());
  if (prompt->size() > served.max_prompts) {
    return InvalidParam("prompt", absl::StrCat(prompt->size(), " prompts; at most ",
                                               served.max_prompts, " per request"));
  }
  for (const Json& p : *prompt) {
    if (p.is_string()) {
      calls.emplace_back().set_text(p.get<std::string>());
    } else if (p.is_array()) {
      RETURN_IF_ERROR(token_ids(p, calls.emplace_back()));
    } else {
      return InvalidParam("prompt", "list items must be strings or token-id lists");
    }
  }
  return absl::OkStatus();
}

// Chat messages -> ChatInput. Content is a string or a list of text parts.
absl::Status ParseMessages(const Json& body, v1::ChatInput& chat) {
  const Json* messages = Field(body, "messages");
  if (messages == nullptr) return InvalidParam("messages", "is required");
  if (!messages->is_array() || messages->empty()) {
    return InvalidParam("messages", "must be a non-empty list");
  }
  for (const Json& m : *messages) {
    if (!m.is_object()) return InvalidParam("messages", "each message must be an object");
    std::optional<std::string> role;
    RETURN_IF_ERROR(GetString(m, "role", role));
    if (!role.has_value()) return InvalidParam("messages", "a message has no role");
    if (*role == "developer") role = "system";
    if (*role != "system" && *role != "user" && *role != "assistant") {
      return InvalidParam("messages", "role \"" + *role +
                                          "\" is not supported (system, developer, user, "
                                          "assistant)");
    }
    if (Field(m, "tool_calls") != nullptr || Field(m, "function_call") != nullptr) {
      return InvalidParam("messages", "tool calls are not supported");
    }
    std::string content;
    if (const Json* c = Field(m, "content"); c == nullptr) {
      // An assistant turn without content (OpenAI allows it with tool calls).
    } else if (c->is_string()) {
      content = c->get<std::string>();
    } else if (c->is_array()) {
      for (const Json& part : *c) {
        std::optional<std::string> type, text;
        if (!part.is_object()) return InvalidParam("messages", "content parts must be objects");
        RETURN_IF_ERROR(GetString(part, "type", type));
        if (type != "text") {
          return InvalidParam("messages", "content part type \"" + type.value_or("") +
                                              "\" is not supported (text only)");
        }
        RETURN_IF_ERROR(GetString(part, "text", text));
        content += text.value_or("");
      }
    } else {
      return InvalidParam("messages", "content must be a string or a list of text parts");
    }
    v1::ChatMessage* out = chat.add_messages();
    out->set_role(*role);
    out->set_content(std::move(content));
  }
  if (const Json* kwargs = Field(body, "chat_template_kwargs"); kwargs != nullptr) {
    if (!kwargs->is_object()) return InvalidParam("chat_template_kwargs", "must be an object");
    for (const auto& [key, value] : kwargs->items()) {
      std::string text;
      if (value.is_boolean()) {
        text = value.get<bool>() ? "true" : "false";
      } else if (value.is_string()) {
        text = value.get<std::string>();
      } else {
        return InvalidParam("chat_template_kwargs", "values must be booleans or strings");
      }
      (*chat.mutable_template_kwargs())[key] = text;
    }
  }
  return absl::OkStatus();
}

absl::Status ParseStop(const Json& body, const ServedModel& served, v1::StopParams& stop) {
  if (const Json* s = Field(body, "stop"); s != nullptr) {
    std::vector<std::string> strings;
    if (s->is_string()) {
      strings.push_back(s->get<std::string>());
    } else if (s->is_array()) {
      for (const Json& item : *s) {
        if (!item.is_string()) return InvalidParam("stop", "must be a string or a list of strings");
        strings.push_back(item.get<std::string>());
      }
    } else {
      return InvalidParam("stop", "must be a string or a list of strings");
    }
    if (strings.size() > served.max_stop_sequences) {
      return InvalidParam("stop", absl::StrCat(strings.size(), " stop sequences; at most ",
                                               served.max_stop_sequences));
    }
    for (std::string& text : strings) {
      if (text.empty()) return InvalidParam("stop", "stop sequences must not be empty");
      stop.add_stop_strings(std::move(text));
    }
  }
  if (const Json* ids = Field(body, "stop_token_ids"); ids != nullptr) {
    if (!ids->is_array()) return InvalidParam("stop_token_ids", "must be a list of token ids");
    for (const Json& id : *ids) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 ||
          id.get<int64_t>() > std::numeric_limits<uint32_t>::max()) {
        return InvalidParam("stop_token_ids", "must be a list of token ids");
      }
      stop.add_stop_token_ids(static_cast<uint32_t>(id.get<int64_t>()));
    }
  }
  std::optional<int64_t> min_tokens;
  RETURN_IF_ERROR(GetInt(body, "min_tokens", 0, std::numeric_limits<uint32_t>::max(), min_tokens));
  if (min_tokens) stop.set_min_new_tokens(static_cast<uint32_t>(*min_tokens));
  std::optional<bool> flag;
  RETURN_IF_ERROR(GetBool(body, "ignore_eos", flag));
  stop.set_ignore_eos(flag.value_or(false));
  flag.reset();
  RETURN_IF_ERROR(GetBool(body, "include_stop_str_in_output", flag));
  stop.set_include_stop_in_output(flag.value_or(false));
  return absl::OkStatus();
}

absl::Status ParseSampling(const Json& body, const ServedModel& served, uint32_t n,
                           v1::SamplingParams& sampling) {
  std::optional<double> d;
  RETURN_IF_ERROR(GetNumber(body, "temperature", d));
  if (d) sampling.set_temperature(static_cast<float>(*d));
  d.reset();
  RETURN_IF_ERROR(GetNumber(body, "top_p", d));
  if (d) sampling.set_top_p(static_cast<float>(*d));
  d.reset();
  RETURN_IF_ERROR(GetNumber(body, "min_p", d));
  if (d) sampling.set_min_p(static_cast<float>(*d));
  d.reset();
  RETURN_IF_ERROR(GetNumber(body, "presence_penalty", d));
  if (d) sampling.set_presence_penalty(static_cast<float>(*d));
  d.reset();
  RETURN_IF_ERROR(GetNumber(body, "frequency_penalty", d));
  if (d) sampling.set_frequency_penalty(static_cast<float>(*d));
  d.reset();
  RETURN_IF_ERROR(GetNumber(body, "repetition_penalty", d));
  if (d) sampling.set_repetition_penalty(static_cast<float>(*d));
  std::optional<int64_t> i;
  // vLLM's convention: -1 (or 0) turns top-k off.
  RETURN_IF_ERROR(GetInt(body, "top_k", -1, std::numeric_limits<int32_t>::max(), i));
  if (i && *i > 0) sampling.set_top_k(static_cast<int32_t>(*i));
  if (const Json* seed = Field(body, "seed"); seed != nullptr) {
    if (!seed->is_number_integer()) return InvalidParam("seed", "must be an integer");
    // Negative seeds keep their two's-complement bits: distinct and repeatable.
    sampling.set_seed(seed->is_number_unsigned() ? seed->get<uint64_t>()
                                                 : static_cast<uint64_t>(seed->get<int64_t>()));
  }
  if (const Json* bias = Field(body, "logit_bias"); bias != nullptr) {
    if (!bias->is_object()) return InvalidParam("logit_bias", "must map token ids to biases");
    if (bias->size() > served.max_logit_bias_entries) {
      return InvalidParam("logit_bias", absl::StrCat(bias->size(), " entries; at most ",
                                                     served.max_logit_bias_entries));
    }
    for (const auto& [key, value] : bias->items()) {
      uint32_t id = 0;
      if (!absl::SimpleAtoi(key, &id)) {
        return InvalidParam("logit_bias", "key \"" + key + "\" is not a token id");
      }
      if (!value.is_number() || !std::isfinite(value.get<double>()) ||
          std::abs(value.get<double>()) > 100.0) {
        return InvalidParam("logit_bias", "biases must be numbers in [-100, 100]");
      }
      (*sampling.mutable_logit_bias())[id] = static_cast<float>(value.get<double>());
    }
  }
  if (n > 1) sampling.set_num_samples(n);
  return absl::OkStatus();
}

// response_format and the guided_* extensions -> one constraint.
absl::Status ParseConstraint(const Json& body, const ServedModel& served,
                             v1::StructuredOutput& constraint) {
  int kinds = 0;
  auto need = [&](const char* param, const std::string& kind) -> absl::Status {
    ++kinds;
    if (kinds > 1) return InvalidParam(param, "only one structured-output constraint is allowed");
    for (const std::string& k : served.structured_output_kinds) {
      if (k == kind) return absl::OkStatus();
    }
    return InvalidParam(param, "structured output (" + kind + ") is not available on this server");
  };
  if (const Json* format = Field(body, "response_format"); format != nullptr) {
    if (!format->is_object()) return InvalidParam("response_format", "must be an object");
    std::optional<std::string> type;
    RETURN_IF_ERROR(GetString(*format, "type", type));
    if (!type.has_value()) return InvalidParam("response_format", "type is required");
    if (*type == "json_object") {
      RETURN_IF_ERROR(need("response_format", "json_object"));
      constraint.set_json_object(true);
    } else if (*type == "json_schema") {
      RETURN_IF_ERROR(need("response_format", "json_schema"));
      const Json* spec = Field(*format, "json_schema");
      if (spec == nullptr || !spec->is_object()) {
        return InvalidParam("response_format", "json_schema must be an object with a schema");
      }
      const Json* schema = Field(*spec, "schema");
      if (schema == nullptr || !(schema->is_object() || schema->is_boolean())) {
        return InvalidParam("response_format", "json_schema.schema must be a JSON Schema");
      }
      constraint.set_json_schema(schema->dump());
      std::optional<bool> strict;
      RETURN_IF_ERROR(GetBool(*spec, "strict", strict));
      constraint.set_strict(strict.value_or(false));
    } else if (*type != "text") {
      return InvalidParam("response_format",
                          "type must be text, json_object or json_schema, not \"" + *type + "\"");
    }
  }
  if (const Json* schema = Field(body, "guided_json"); schema != nullptr) {
    RETURN_IF_ERROR(need("guided_json", "json_schema"));
    if (schema->is_string()) {
      constraint.set_json_schema(schema->get<std::string>());
    } else if (schema->is_object()) {
      constraint.set_json_schema(schema->dump());
    } else {
      return InvalidParam("guided_json", "must be a JSON Schema (object or string)");
    }
  }
  std::optional<std::string> text;
  RETURN_IF_ERROR(GetString(body, "guided_regex", text));
  if (text) {
    RETURN_IF_ERROR(need("guided_regex", "regex"));
    constraint.set_regex(*text);
  }
  text.reset();
  RETURN_IF_ERROR(GetString(body, "guided_grammar", text));
  if (text) {
    RETURN_IF_ERROR(need("guided_grammar", "ebnf"));
    constraint.set_ebnf(*text);
  }
  if (const Json* choice = Field(body, "guided_choice"); choice != nullptr) {
    RETURN_IF_ERROR(need("guided_choice", "choice"));
    if (!choice->is_array() || choice->empty()) {
      return InvalidParam("guided_choice", "must be a non-empty list of strings");
    }
    for (const Json& c : *choice) {
      if (!c.is_string()) return InvalidParam("guided_choice", "must be a list of strings");
      constraint.mutable_choice()->add_choices(c.get<std::string>());
    }
  }
  return absl::OkStatus();
}

// logprobs / top_logprobs / echo -> output options.
absl::Status ParseLogprobs(Endpoint endpoint, const Json& body, const ServedModel& served,
                           OpenAiRequest& out) {
  const char* param = "logprobs";
  if (endpoint == Endpoint::kCompletions) {
    std::optional<int64_t> k;
    RETURN_IF_ERROR(GetInt(body, "logprobs", 0, 20, k));
    if (k) out.logprobs = static_cast<uint32_t>(*k);
  } else {
    std::optional<bool> on;
    std::optional<int64_t> k;
    RETURN_IF_ERROR(GetBool(body, "logprobs", on));
    RETURN_IF_ERROR(GetInt(body, "top_logprobs", 0, 20, k));
    if (k && !on.value_or(false)) {
      return InvalidParam("top_logprobs", "needs logprobs: true");
    }
    if (on.value_or(false)) out.logprobs = static_cast<uint32_t>(k.value_or(0));
    if (k) param = "top_logprobs";
  }
  if (!out.logprobs.has_value()) return absl::OkStatus();
  // The engine counts alternatives including the chosen token: at least 1.
  const uint32_t wanted = std::max<uint32_t>(*out.logprobs, 1);
  if (wanted > served.max_top_logprobs) {
    return InvalidParam(param, served.max_top_logprobs == 0
                                   ? "logprobs are not supported by this server"
                                   : absl::StrCat("at most ", served.max_top_logprobs,
                                                  " logprobs per token on this server"));
  }
  for (v1::GenerateRequest& call : out.calls) call.mutable_output()->set_top_logprobs(wanted);
  return absl::OkStatus();
}

}  // namespace

ServedModel ServedModel::FromModelInfo(const v1::ModelInfo& info) {
  ServedModel served;
  served.name = info.name();
  served.max_context_tokens = info.max_context_tokens();
  served.max_new_tokens_limit = info.max_new_tokens_limit();
  const v1::ModelInfo::Features& f = info.features();
  served.max_num_samples = std::max<uint32_t>(f.max_num_samples(), 1);
  served.max_top_logprobs = f.max_top_logprobs();
  served.prompt_logprobs = f.prompt_logprobs();
  served.max_stop_sequences = f.max_stop_sequences();
  served.max_logit_bias_entries = f.max_logit_bias_entries();
  served.structured_output_kinds.assign(f.structured_output_kinds().begin(),
                                        f.structured_output_kinds().end());
  return served;
}

absl::Status InvalidParam(std::string_view param, std::string_view message) {
  if (param.empty()) return absl::InvalidArgumentError(std::string(message));
  std::string text(param);
  text.append(": ").append(message);
  absl::Status status = absl::InvalidArgumentError(text);
  status.SetPayload(kParamPayload, absl::Cord(std::string(param)));
  return status;
}

std::string ParamOf(const absl::Status& status) {
  const auto param = status.GetPayload(kParamPayload);
  return param.has_value() ? std::string(*param) : "";
}

absl::StatusOr<OpenAiRequest> ParseOpenAiRequest(Endpoint endpoint, const Json& body,
                                                 const ServedModel& served) {
  if (!body.is_object()) return InvalidParam("", "the request body must be a JSON object");
  OpenAiRequest out;
  out.endpoint = endpoint;
  std::optional<std::string> model;
  RETURN_IF_ERROR(GetString(body, "model", model));
  if (model && !model->empty() && *model != served.name) {
    absl::Status status = absl::NotFoundError(
        "The model `" + *model + "` does not exist; this server serves `" + served.name + "`");
    status.SetPayload(kParamPayload, absl::Cord(std::string("model")));
    return status;
  }
  RETURN_IF_ERROR(RefuseUnsupported(endpoint, body));

  if (endpoint == Endpoint::kCompletions) {
    RETURN_IF_ERROR(ParsePrompts(body, served, out.calls));
  } else {
    RETURN_IF_ERROR(ParseMessages(body, *out.calls.emplace_back().mutable_chat()));
  }

  std::optional<bool> stream;
  RETURN_IF_ERROR(GetBool(body, "stream", stream));
  out.stream = stream.value_or(false);
  if (const Json* options = Field(body, "stream_options"); options != nullptr) {
    if (!out.stream) return InvalidParam("stream_options", "is only allowed with stream: true");
    if (!options->is_object()) return InvalidParam("stream_options", "must be an object");
    std::optional<bool> usage;
    RETURN_IF_ERROR(GetBool(*options, "include_usage", usage));
    out.include_usage = usage.value_or(false);
  }

  std::optional<int64_t> n;
  RETURN_IF_ERROR(GetInt(body, "n", 1, 1 << 20, n));
  out.n = static_cast<uint32_t>(n.value_or(1));
  if (out.n > served.max_num_samples) {
    return InvalidParam("n", absl::StrCat("n=", out.n,
                                          " is not supported: this server returns "
                                          "at most ",
                                          served.max_num_samples, " choice(s) per prompt"));
  }
  if (endpoint == Endpoint::kCompletions) {
    std::optional<int64_t> best_of;
    RETURN_IF_ERROR(GetInt(body, "best_of", 1, 1 << 20, best_of));
    if (best_of && *best_of != out.n) {
      return InvalidParam("best_of", "is not supported (only best_of = n)");
    }
  }

  // max_tokens: the engine clamps to the context left after the prompt.
  std::optional<int64_t> max_tokens;
  const int64_t limit = served.max_new_tokens_limit > 0 ? served.max_new_tokens_limit
                                                        : std::numeric_limits<uint32_t>::max();
  const char* max_param = "max_tokens";
  if (endpoint == Endpoint::kChatCompletions && Field(body, "max_completion_tokens") != nullptr) {
    max_param = "max_completion_tokens";
  }
  {
    std::optional<int64_t> raw;
    RETURN_IF_ERROR(GetInt(body, max_param, std::numeric_limits<int64_t>::min(),
                           std::numeric_limits<int64_t>::max(), raw));
    if (raw && (*raw < 1 || *raw > limit)) {
      return InvalidParam(max_param, absl::StrCat(*raw, " is out of range: must be in [1, ", limit,
                                                  "] (the model's context is ",
                                                  served.max_context_tokens, " tokens)"));
    }
    max_tokens = raw;
  }
  if (!max_tokens && endpoint == Endpoint::kCompletions) max_tokens = kCompletionsDefaultMaxTokens;

  v1::GenerateRequest common;
  RETURN_IF_ERROR(ParseSampling(body, served, out.n, *common.mutable_sampling()));
  RETURN_IF_ERROR(ParseStop(body, served, *common.mutable_stop()));
  if (max_tokens) common.mutable_stop()->set_max_new_tokens(static_cast<uint32_t>(*max_tokens));
  RETURN_IF_ERROR(ParseConstraint(body, served, *common.mutable_constraint()));
  std::optional<int64_t> priority;
  RETURN_IF_ERROR(GetInt(body, "priority", std::numeric_limits<int32_t>::min(),
                         std::numeric_limits<int32_t>::max(), priority));
  if (priority) common.set_priority(static_cast<int32_t>(*priority));
  // OpenAI's end-user id is the fair-share key (GenerateRequest.tenant).
  std::optional<std::string> user;
  RETURN_IF_ERROR(GetString(body, "user", user));
  if (user) common.set_tenant(*user);
  std::optional<bool> skip_special;
  RETURN_IF_ERROR(GetBool(body, "skip_special_tokens", skip_special));
  v1::OutputOptions& output = *common.mutable_output();
  // The HTTP server always reads deltas (streaming or collecting them).
  output.set_stream_tokens(true);
  output.set_skip_special_tokens(skip_special.value_or(true));
  output.set_return_token_ids(true);
  for (v1::GenerateRequest& call : out.calls) call.MergeFrom(common);

  RETURN_IF_ERROR(ParseLogprobs(endpoint, body, served, out));
  if (endpoint == Endpoint::kCompletions) {
    std::optional<bool> echo;
    RETURN_IF_ERROR(GetBool(body, "echo", echo));
    if (echo.value_or(false)) {
      if (out.logprobs.has_value()) {
        if (!served.prompt_logprobs) {
          return InvalidParam("echo",
                              "echo with logprobs needs prompt logprobs, which this "
                              "server does not support");
        }
        for (v1::GenerateRequest& call : out.calls) {
          call.mutable_output()->set_prompt_logprobs(std::max<uint32_t>(*out.logprobs, 1));
        }
      }
      for (const v1::GenerateRequest& call : out.calls) {
        if (call.input_case() != v1::GenerateRequest::kText) {
          return InvalidParam("echo", "echo needs text prompts (not token ids)");
        }
        out.echo.push_back(call.text());
      }
    }
  }
  return out;
}

}  // namespace weir::coordinator::http
