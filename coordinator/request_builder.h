// coordinator/request_builder.h
//
// BuildRequest turns a public GenerateRequest into what the step loop runs:
// the prompt ids (from token ids, text, or a chat through the chat
// template), stop conditions, validated sampling parameters and a seed, and
// the output options. Every field is checked against the model and the
// advertised limits; the first problem is an INVALID_ARGUMENT naming the field.
// A structured-output constraint is compiled once here (against the served
// vocabulary) so a bad schema, regex or EBNF is refused before admission
// (INVALID_ARGUMENT with GRAMMAR_INVALID or GRAMMAR_TOO_COMPLEX).
//
// Thread safety: pure function; the tokenizer is only read.

#ifndef WEIR_COORDINATOR_REQUEST_BUILDER_H_
#define WEIR_COORDINATOR_REQUEST_BUILDER_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grammar/compiler.h"
#include "proto/inference.pb.h"
#include "tokenizer/tokenizer.h"

namespace weir::coordinator {

struct RequestLimits {
  int64_t vocab_size = 0;
  int64_t max_context_tokens = 0;
  uint32_t default_max_new_tokens = 256;
  uint32_t max_num_samples = 1;
  uint32_t max_stop_sequences = 16;
  uint32_t max_stop_string_len = 256;
  uint32_t max_logit_bias_entries = 1024;
  uint32_t max_top_logprobs = 0;
  uint32_t max_request_id_bytes = 128;
  // GenerateRequest.labels: at most this many, keys 1..64 bytes, values at
  // most 512 bytes (the bounds of BatchJob labels).
  uint32_t max_labels = 16;
  // The model's end-of-sequence ids (the scheduler's kEos), so a tracker can
  // keep a grammar-terminating EOS out of the text.
  std::vector<uint32_t> eos_token_ids;
  // Bound on a constraint's text (schema, regex, EBNF, all choices).
  uint64_t max_schema_bytes = 1 << 20;
  // Compiles constraints against the served vocabulary; null: constraints
  // are refused (FAILED_PRECONDITION). Not owned.
  grammar::GrammarCompiler* grammar = nullptr;
};

struct BuiltRequest {
  std::vector<uint32_t> prompt;
  uint32_t max_new_tokens = 0;
  uint32_t min_new_tokens = 0;
  std::vector<uint32_t> stop_token_ids;
  bool ignore_eos = false;
  std::vector<std::string> stop_strings;
  bool include_stop_in_output = false;
  v1::SamplingParams sampling;  // validated; defaults filled in
  uint64_t seed = 0;
  // SamplingParams.num_samples (0 read as 1): sample i is a sequence of its
  // own with seed `seed + i`.
  uint32_t num_samples = 1;
  bool stream_tokens = false;
  bool return_text = true;
  bool return_token_ids = true;
  bool skip_special_tokens = false;
  // GenerateRequest.priority (lower is more urgent) and tenant (<= 128 bytes).
  int32_t priority = 0;
  std::string tenant;
  // OutputOptions.top_logprobs (0 = off), prompt_logprobs, echo_prompt.
  uint32_t top_logprobs = 0;
  std::optional<uint32_t> prompt_logprobs;
  bool echo_prompt = false;
  // The request's constraint (no kind set: unconstrained); it compiled.
  v1::StructuredOutput constraint;
  // The constraint admits only the empty string: the request ends at once
  // with no token (GRAMMAR_TERMINATED) and never reaches a worker.
  bool constraint_admits_only_empty = false;
  // GenerateRequest.max_queue_time (validated), if set.
  std::optional<absl::Duration> max_queue_time;
  // Copied from RequestLimits.
  std::vector<uint32_t> eos_token_ids;
};

// The longest prompt admitted: one position of the context is left for the
// first generated token. GetModelInfo advertises it as max_prompt_tokens.
int64_t MaxPromptTokens(int64_t max_context_tokens);

// The largest StopParams.max_new_tokens admitted (what a one-token prompt
// leaves of the context); GetModelInfo advertises it as max_new_tokens_limit.
int64_t MaxNewTokensLimit(int64_t max_context_tokens);

// Errors are INVALID_ARGUMENT naming the field (a google.rpc.BadRequest
// payload, see api_error.h); a prompt over MaxPromptTokens without
// truncate_prompt_tokens is PROMPT_TOO_LONG{tokens, limit}; constraints fail
// with GRAMMAR_INVALID / GRAMMAR_TOO_COMPLEX.
// `tokenizer` may be null (text and chat inputs are then FAILED_PRECONDITION).
// `random_seed` is used when the request sets no seed. With a constraint,
// blocks this thread while it compiles (bounded by the compiler's timeout;
// cached afterwards).
absl::StatusOr<BuiltRequest> BuildRequest(const v1::GenerateRequest& request,
                                          const RequestLimits& limits,
                                          const tokenizer::Tokenizer* tokenizer,
                                          uint64_t random_seed);

}  // namespace weir::coordinator

#endif  // WEIR_COORDINATOR_REQUEST_BUILDER_H_
