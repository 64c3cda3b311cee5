// base/model_summary.h
//
// ModelSummary: what the coordinator and workers need to know about the served model
// (name, vocabulary, context limit, experts, special ids, revision), read from
// the model directory's config.json. Accepts the Hugging Face layout (keys at
// the top level or under "text_config") and the inference layout.
//
// Thread safety: value type.

#ifndef WEIR_BASE_MODEL_SUMMARY_H_
#define WEIR_BASE_MODEL_SUMMARY_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace weir {

struct ModelSummary {
  std::string name;
  // 16 hex digits: xxHash64 of config.json.
  std::string revision;
  int64_t vocab_size = 0;
  int64_t max_context_tokens = 0;
  int64_t num_layers = 0;
  int64_t num_routed_experts = 0;
  std::optional<int64_t> bos_token_id;
  std::vector<int64_t> eos_token_ids;
  std::optional<int64_t> pad_token_id;
  std::string quantization;
};

// Parses config.json text. `fallback_name` names the model when the config
// has no "name"/"_name_or_path". INVALID_ARGUMENT (naming the key) for
// malformed JSON, a missing vocab size or layer count, or non-positive values.
absl::StatusOr<ModelSummary> ParseModelSummary(std::string_view config_json,
                                               std::string_view fallback_name);

// Reads `<model_dir>/config.json`. NOT_FOUND if it does not exist.
absl::StatusOr<ModelSummary> LoadModelSummary(const std::string& model_dir);

}  // namespace weir

#endif  // WEIR_BASE_MODEL_SUMMARY_H_
