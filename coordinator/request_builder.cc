#include "coordinator/request_builder.h"

#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"
#include "coordinator/api_error.h"
#include "grammar/matcher.h"
#include "grammar/structured_output.h"
#include "tokenizer/chat_template.h"
#include "worker/sampling/sampling_params.h"

namespace weir::coordinator {
namespace {

constexpr size_t kMaxLabelKeyBytes = 64;
constexpr size_t kMaxLabelValueBytes = 512;
constexpr size_t kMaxTenantBytes = 128;

absl::Status Bad(const std::string& field, const std::string& why) {
  return WithBadField(absl::InvalidArgumentError(absl::StrCat(field, ": ", why)), field, why);
}

absl::Status CheckLabels(const v1::GenerateRequest& request, const RequestLimits& limits) {
  if (static_cast<uint32_t>(request.labels_size()) > limits.max_labels) {
    return Bad("labels", absl::StrCat(request.labels_size(), " labels; at most ",
                                      limits.max_labels));
  }
  for (const auto& [key, value] : request.labels()) {
    if (key.empty() || key.size() > kMaxLabelKeyBytes || value.size() > kMaxLabelValueBytes) {
      return Bad("labels", absl::StrCat("keys must be 1..", kMaxLabelKeyBytes,
                                        " bytes and values at most ", kMaxLabelValueBytes));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckMaxQueueTime(const v1::GenerateRequest& request) {
  if (!request.has_max_queue_time()) return absl::OkStatus();
  const int64_t seconds = request.max_queue_time().seconds();
  const int32_t nanos = request.max_queue_time().nanos();
  if (nanos <= -1000000000 || nanos >= 1000000000 || (seconds > 0 && nanos < 0) ||
      (seconds < 0 && nanos > 0)) {
    return Bad("max_queue_time", "not a valid Duration");
  }
  if (seconds < 0 || nanos < 0) return Bad("max_queue_time", "must not be negative");
  return absl::OkStatus();
}

absl::StatusOr<std::vector<uint32_t>> Prompt(const v1::GenerateRequest& request,
                                             const RequestLimits& limits,
                                             const tokenizer::Tokenizer* tokenizer) {
  std::vector<uint32_t> ids;
  switch (request.input_case()) {
    case v1::GenerateRequest::kTokens:
      for (uint32_t id : request.tokens().ids()) {
        if (id >= limits.vocab_size) {
          return Bad("tokens.ids", absl::StrCat("token ", id, " >= vocab size ",
                                                limits.vocab_size));
        }
        ids.push_back(id);
      }
      break;
    case v1::GenerateRequest::kText:
    case v1::GenerateRequest::kChat: {
      // Encoding adds BOS, so an empty text would pass the empty-prompt check below.
      if (request.input_case() == v1::GenerateRequest::kText && request.text().empty()) {
        return Bad("text", "the prompt is empty");
      }
      if (tokenizer == nullptr) {
        return absl::FailedPreconditionError("the served model has no tokenizer; send tokens");
      }
      absl::StatusOr<std::vector<int32_t>> encoded;
      if (request.input_case() == v1::GenerateRequest::kText) {
        encoded = tokenizer->Encode(request.text(), /*add_special_tokens=*/true);
      } else {
        const std::map<std::string, std::string> kwargs(
            request.chat().template_kwargs().begin(), request.chat().template_kwargs().end());
        absl::StatusOr<tokenizer::ChatOptions> options = tokenizer::ParseTemplateKwargs(kwargs);
        if (!options.ok()) return options.status();
        std::vector<tokenizer::ChatMessage> messages;
        for (const v1::ChatMessage& m : request.chat().messages()) {
          messages.push_back({m.role(), m.content()});
        }
        encoded = tokenizer::EncodeChat(*tokenizer, messages, *options);
      }
      if (!encoded.ok()) return encoded.status();
      ids.assign(encoded->begin(), encoded->end());
      break;
    }
    default:
      return Bad("input", "give tokens, text or chat");
  }
  if (ids.empty()) return Bad("input", "the prompt is empty");
  return ids;
}

// Returns whether the constraint admits only the empty string.
absl::StatusOr<bool> CheckConstraint(const v1::StructuredOutput& constraint,
                                     const RequestLimits& limits) {
  if (limits.grammar == nullptr) {
    return absl::FailedPreconditionError(
        "structured output needs the model's tokenizer, which this server has not loaded");
  }
  uint64_t bytes = constraint.json_schema().size() + constraint.regex().size() +
                   constraint.ebnf().size() + constraint.whitespace_pattern().size();
  for (const std::string& c : constraint.choice().choices()) bytes += c.size();
  if (bytes > limits.max_schema_bytes) {
    return Bad("constraint", absl::StrCat("GRAMMAR_TOO_COMPLEX: ", bytes, " bytes, limit ",
                                          limits.max_schema_bytes));
  }
  absl::StatusOr<grammar::Constraint> converted = grammar::ConstraintFromProto(constraint);
  if (!converted.ok()) return converted.status();
  grammar::CompileResult compiled = limits.grammar->Compile(*converted);
  if (!compiled.ok()) {
    absl::Status error = grammar::GrammarError(compiled.status());
    if (error.code() != absl::StatusCode::kInvalidArgument) return error;
    return Bad("constraint", std::string(error.message()));
  }
  // A matcher that is terminated before any token admits only "" (regex "",
  // "()", "a{0}", EBNF root ::= "", choice [""]): no token may be generated.
  return grammar::Matcher(*compiled).IsTerminated();
}

}  // namespace

// api.md §2.3 truncates a prompt to "max_context - max_new_tokens" tokens, so
// prompt + max_new_tokens <= max_context with max_new_tokens >= 1: the longest
// prompt is max_context - 1 (what the scheduler admits), and GetModelInfo
// advertises exactly that.
int64_t MaxPromptTokens(int64_t max_context_tokens) {
  return std::max<int64_t>(max_context_tokens - 1, 0);
}

int64_t MaxNewTokensLimit(int64_t max_context_tokens) {
  return std::max<int64_t>(max_context_tokens - 1, 0);
}

absl::StatusOr<BuiltRequest> BuildRequest(const v1::GenerateRequest& request,
                                          const RequestLimits& limits,
                                          const tokenizer::Tokenizer* tokenizer,
                                          uint64_t random_seed) {
  if (request.request_id().size() > limits.max_request_id_bytes) {
    return Bad("request_id", absl::StrCat("longer than ", limits.max_request_id_bytes, " bytes"));
  }
  if (absl::Status s = CheckLabels(request, limits); !s.ok()) return s;
  if (absl::Status s = CheckMaxQueueTime(request); !s.ok()) return s;
  BuiltRequest built;
  built.eos_token_ids = limits.eos_token_ids;
  absl::StatusOr<std::vector<uint32_t>> prompt = Prompt(request, limits, tokenizer);
  if (!prompt.ok()) return prompt.status();
  built.prompt = std::move(*prompt);

  // api.md §2.1 asks for a server-side limit on every count, advertised by
  // GetModelInfo, and §4.G.37 lists max_new_tokens = 2^32-1 as INVALID_ARGUMENT:
  // above MaxNewTokensLimit is refused, not clamped.
  const v1::StopParams& stop = request.stop();
  const int64_t new_limit = MaxNewTokensLimit(limits.max_context_tokens);
  if (stop.has_max_new_tokens()) {
    if (stop.max_new_tokens() == 0) return Bad("stop.max_new_tokens", "must be >= 1");
    if (stop.max_new_tokens() > new_limit) {
      return Bad("stop.max_new_tokens", absl::StrCat(stop.max_new_tokens(), " is above the limit ",
                                                     new_limit, " (max_new_tokens_limit)"));
    }
  }
  const uint32_t wanted_new = static_cast<uint32_t>(std::min<int64_t>(
      stop.has_max_new_tokens() ? stop.max_new_tokens() : limits.default_max_new_tokens,
      new_limit));
  if (wanted_new == 0) return Bad("stop.max_new_tokens", "must be >= 1");

  // truncate_prompt_tokens (api.md §2.3): -1 keeps the last
  // max_context - max_new_tokens tokens; k >= 1 keeps the last k.
  const int64_t prompt_limit = MaxPromptTokens(limits.max_context_tokens);
  if (request.has_truncate_prompt_tokens()) {
    const int32_t k = request.truncate_prompt_tokens();
    int64_t keep = 0;
    if (k == -1) {
      keep = limits.max_context_tokens - static_cast<int64_t>(wanted_new);
    } else if (k >= 1 && k <= prompt_limit) {
      keep = k;
    } else {
      return Bad("truncate_prompt_tokens",
                 absl::StrCat("must be -1 or 1..", prompt_limit, ", got ", k));
    }
    if (static_cast<int64_t>(built.prompt.size()) > keep) {
      built.prompt.erase(built.prompt.begin(), built.prompt.end() - keep);
    }
  }
  if (static_cast<int64_t>(built.prompt.size()) > prompt_limit) {
    const std::string tokens = absl::StrCat(built.prompt.size());
    const std::string limit = absl::StrCat(prompt_limit);
    return WithBadField(
        WithReason(absl::InvalidArgumentError(absl::StrCat(
                       "PROMPT_TOO_LONG: ", tokens, " tokens, limit ", limit,
                       " (max_prompt_tokens; set truncate_prompt_tokens to keep the last ones)")),
                   kReasonPromptTooLong, {{"tokens", tokens}, {"limit", limit}}),
        "input", absl::StrCat(tokens, " tokens, limit ", limit));
  }

  const int64_t room = limits.max_context_tokens - static_cast<int64_t>(built.prompt.size());
  built.max_new_tokens = wanted_new;
  if (built.max_new_tokens > room) built.max_new_tokens = static_cast<uint32_t>(room);
  built.min_new_tokens = stop.min_new_tokens();
  if (built.min_new_tokens > built.max_new_tokens) {
    return Bad("stop.min_new_tokens", "exceeds max_new_tokens");
  }
  if (static_cast<uint32_t>(stop.stop_strings_size()) > limits.max_stop_sequences ||
      static_cast<uint32_t>(stop.stop_token_ids_size()) > limits.max_stop_sequences) {
    return Bad("stop", absl::StrCat("more than ", limits.max_stop_sequences, " stop entries"));
  }
  for (const std::string& s : stop.stop_strings()) {
    if (s.empty()) return Bad("stop.stop_strings", "a stop string is empty");
    if (s.size() > limits.max_stop_string_len) {
      return Bad("stop.stop_strings", absl::StrCat("longer than ", limits.max_stop_string_len,
                                                   " bytes"));
    }
    built.stop_strings.push_back(s);
  }
  for (uint32_t id : stop.stop_token_ids()) {
    if (id >= limits.vocab_size) return Bad("stop.stop_token_ids", "token id >= vocab size");
    built.stop_token_ids.push_back(id);
  }
  built.ignore_eos = stop.ignore_eos();
  built.include_stop_in_output = stop.include_stop_in_output();

  const v1::SamplingParams& in = request.sampling();
  if (in.num_samples() > limits.max_num_samples) {
    return Bad("sampling.num_samples", absl::StrCat("at most ", limits.max_num_samples));
  }
  worker::sampling::SamplingParams check;
  check.temperature = in.has_temperature() ? in.temperature() : 1.0f;
  check.top_k = in.has_top_k() ? in.top_k() : 0;
  check.top_p = in.has_top_p() ? in.top_p() : 1.0f;
  check.min_p = in.has_min_p() ? in.min_p() : 0.0f;
  check.repetition_penalty = in.has_repetition_penalty() ? in.repetition_penalty() : 1.0f;
  check.frequency_penalty = in.has_frequency_penalty() ? in.frequency_penalty() : 0.0f;
  check.presence_penalty = in.has_presence_penalty() ? in.presence_penalty() : 0.0f;
  for (const auto& [id, bias] : in.logit_bias()) {
    check.logit_bias.emplace_back(static_cast<int32_t>(std::min<uint64_t>(id, INT32_MAX)), bias);
  }
  worker::sampling::SamplingLimits sampling_limits{
      .vocab_size = static_cast<int32_t>(limits.vocab_size),
      .max_logit_bias_entries = static_cast<int32_t>(limits.max_logit_bias_entries)};
  if (absl::Status s = worker::sampling::ValidateSamplingParams(check, sampling_limits); !s.ok()) {
    return s;
  }
  built.sampling = in;
  built.sampling.set_temperature(check.temperature);
  built.seed = in.has_seed() ? in.seed() : random_seed;
  built.num_samples = std::max<uint32_t>(in.num_samples(), 1);
  built.priority = request.priority();
  if (request.tenant().size() > kMaxTenantBytes) {
    return Bad("tenant", absl::StrCat("longer than ", kMaxTenantBytes, " bytes"));
  }
  built.tenant = request.tenant();
  if (request.has_max_queue_time()) {
    built.max_queue_time = absl::Seconds(request.max_queue_time().seconds()) +
                           absl::Nanoseconds(request.max_queue_time().nanos());
  }

  const v1::OutputOptions& out = request.output();
  if (out.top_logprobs() > limits.max_top_logprobs) {
    return Bad("output.top_logprobs", absl::StrCat("at most ", limits.max_top_logprobs));
  }
  if (out.has_prompt_logprobs() && out.prompt_logprobs() > limits.max_top_logprobs) {
    return Bad("output.prompt_logprobs", absl::StrCat("at most ", limits.max_top_logprobs));
  }
  built.top_logprobs = out.top_logprobs();
  if (out.has_prompt_logprobs()) built.prompt_logprobs = out.prompt_logprobs();
  built.echo_prompt = out.echo_prompt();
  if (grammar::HasConstraint(request.constraint())) {
    absl::StatusOr<bool> only_empty = CheckConstraint(request.constraint(), limits);
    if (!only_empty.ok()) return only_empty.status();
    built.constraint = request.constraint();
    built.constraint_admits_only_empty = *only_empty;
  }
  built.stream_tokens = out.stream_tokens();
  built.return_text = !out.has_return_text() || out.return_text();
  built.return_token_ids = !out.has_return_token_ids() || out.return_token_ids();
  built.skip_special_tokens = out.skip_special_tokens();
  return built;
}

}  // namespace weir::coordinator
