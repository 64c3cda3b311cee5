#include "base/model_summary.h"

#include <xxhash.h>

#include <filesystem>

#include "absl/strings/str_format.h"
#include "base/read_file.h"
#include "nlohmann/json.hpp"

namespace weir {
namespace {

using Json = nlohmann::json;

// Returns the first integer found under any of `keys` in `scopes`, in order.
std::optional<int64_t> FindInt(const std::vector<const Json*>& scopes,
                               std::initializer_list<const char*> keys) {
  for (const Json* scope : scopes) {
    for (const char* key : keys) {
      auto it = scope->find(key);
      if (it != scope->end() && it->is_number_integer()) return it->get<int64_t>();
    }
  }
  return std::nullopt;
}

}  // namespace

absl::StatusOr<ModelSummary> ParseModelSummary(std::string_view config_json,
                                               std::string_view fallback_name) {
  Json root = Json::parse(config_json.begin(), config_json.end(), /*cb=*/nullptr,
                          /*allow_exceptions=*/false);
  if (root.is_discarded() || !root.is_object()) {
    return absl::InvalidArgumentError("config.json is not a JSON object");
  }
  std::vector<const Json*> scopes;
  auto text = root.find("text_config");
  if (text != root.end() && text->is_object()) scopes.push_back(&*text);
  scopes.push_back(&root);

  ModelSummary summary;
  summary.name = std::string(fallback_name);
  for (const char* key : {"name", "_name_or_path"}) {
    auto it = root.find(key);
    if (it != root.end() && it->is_string() && !it->get<std::string>().empty()) {
      summary.name = it->get<std::string>();
      break;
    }
  }
  std::optional<int64_t> vocab = FindInt(scopes, {"vocab_size"});
  if (!vocab || *vocab <= 0) {
    return absl::InvalidArgumentError("config.json: missing or non-positive \"vocab_size\"");
  }
  std::optional<int64_t> layers = FindInt(scopes, {"num_hidden_layers", "n_layers"});
  if (!layers || *layers <= 0) {
    return absl::InvalidArgumentError(
        "config.json: missing or non-positive \"num_hidden_layers\" / \"n_layers\"");
  }
  summary.vocab_size = *vocab;
  summary.num_layers = *layers;
  summary.max_context_tokens =
      FindInt(scopes, {"max_position_embeddings", "max_seq_len"}).value_or(0);
  if (summary.max_context_tokens < 0) {
    return absl::InvalidArgumentError("config.json: negative \"max_position_embeddings\"");
  }
  summary.num_routed_experts = FindInt(scopes, {"n_routed_experts"}).value_or(0);
  summary.bos_token_id = FindInt(scopes, {"bos_token_id"});
  summary.pad_token_id = FindInt(scopes, {"pad_token_id", "engram_pad_token_id"});
  if (std::optional<int64_t> eos = FindInt(scopes, {"eos_token_id"})) {
    summary.eos_token_ids.push_back(*eos);
  }
  auto quant = root.find("quantization_config");
  if (quant != root.end() && quant->is_object()) {
    auto method = quant->find("quant_method");
    summary.quantization = method != quant->end() && method->is_string()
                               ? method->get<std::string>()
                               : std::string("quantized");
  } else {
    summary.quantization = "none";
  }
  summary.revision = absl::StrFormat(
      "%016x", XXH64(config_json.data(), config_json.size(), /*seed=*/0));
  return summary;
}

absl::StatusOr<ModelSummary> LoadModelSummary(const std::string& model_dir) {
  const std::filesystem::path path = std::filesystem::path(model_dir) / "config.json";
  absl::StatusOr<std::string> text = ReadFile(path.string());
  if (!text.ok()) return text.status();
  return ParseModelSummary(*text, std::filesystem::path(model_dir).filename().string());
}

}  // namespace weir
