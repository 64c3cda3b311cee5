#include "coordinator/request_builder.h"

#include <map>

#include "absl/strings/str_cat.h"
#include "coordinator/tokenizer/chat_template.h"
#include "worker/sampling/sampling_params.h"
#include "worker/structured_output.h"

namespace weir::coordinator {
namespace {

absl::Status Bad(const std::string& field, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", why));
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

absl::Status CheckConstraint(const v1::StructuredOutput& constraint, const RequestLimits& limits) {
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
  absl::StatusOr<grammar::Constraint> converted = worker::ConstraintFromProto(constraint);
  if (!converted.ok()) return converted.status();
  grammar::CompileResult compiled = limits.grammar->Compile(*converted);
  if (!compiled.ok()) {
    absl::Status error = worker::GrammarError(compiled.status());
    if (error.code() != absl::StatusCode::kInvalidArgument) return error;
    return Bad("constraint", std::string(error.message()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<BuiltRequest> BuildRequest(const v1::GenerateRequest& request,
                                          const RequestLimits& limits,
                                          const tokenizer::Tokenizer* tokenizer,
                                          uint64_t random_seed) {
  if (request.request_id().size() > limits.max_request_id_bytes) {
    return Bad("request_id", absl::StrCat("longer than ", limits.max_request_id_bytes, " bytes"));
  }
  BuiltRequest built;
  absl::StatusOr<std::vector<uint32_t>> prompt = Prompt(request, limits, tokenizer);
  if (!prompt.ok()) return prompt.status();
  built.prompt = std::move(*prompt);
  if (request.has_truncate_prompt_tokens()) {
    return Bad("truncate_prompt_tokens", "not supported by this server");
  }
  if (static_cast<int64_t>(built.prompt.size()) >= limits.max_context_tokens) {
    return absl::InvalidArgumentError(absl::StrCat("PROMPT_TOO_LONG: ", built.prompt.size(),
                                                   " tokens, limit ",
                                                   limits.max_context_tokens - 1));
  }

  const v1::StopParams& stop = request.stop();
  const int64_t room = limits.max_context_tokens - static_cast<int64_t>(built.prompt.size());
  built.max_new_tokens = stop.has_max_new_tokens() ? stop.max_new_tokens()
                                                   : limits.default_max_new_tokens;
  if (built.max_new_tokens == 0) return Bad("stop.max_new_tokens", "must be >= 1");
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

  const v1::OutputOptions& out = request.output();
  if (out.top_logprobs() > limits.max_top_logprobs) {
    return Bad("output.top_logprobs", absl::StrCat("at most ", limits.max_top_logprobs));
  }
  if (out.has_prompt_logprobs()) return Bad("output.prompt_logprobs", "not supported");
  if (worker::HasConstraint(request.constraint())) {
    if (absl::Status s = CheckConstraint(request.constraint(), limits); !s.ok()) return s;
    built.constraint = request.constraint();
  }
  built.stream_tokens = out.stream_tokens();
  built.return_text = !out.has_return_text() || out.return_text();
  built.return_token_ids = !out.has_return_token_ids() || out.return_token_ids();
  built.skip_special_tokens = out.skip_special_tokens();
  return built;
}

}  // namespace weir::coordinator
