#include "tokenizer/json_util.h"

#include <string>

namespace weir::tokenizer {

absl::Status CheckFields(const Json& j, std::initializer_list<std::string_view> allowed,
                         std::string_view what) {
  if (!j.is_object()) {
    return absl::InvalidArgumentError(std::string(what) + " must be a JSON object");
  }
  for (auto it = j.begin(); it != j.end(); ++it) {
    bool known = false;
    for (std::string_view a : allowed) known = known || it.key() == a;
    if (!known) {
      return absl::InvalidArgumentError("unsupported field '" + it.key() + "' in " +
                                        std::string(what));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> GetString(const Json& j, std::string_view key, std::string_view what) {
  auto it = j.find(std::string(key));
  if (it == j.end() || !it->is_string()) {
    return absl::InvalidArgumentError(std::string(what) + ": field '" + std::string(key) +
                                      "' must be a string");
  }
  return it->get<std::string>();
}

absl::StatusOr<bool> GetBool(const Json& j, std::string_view key, std::string_view what,
                             bool default_value) {
  auto it = j.find(std::string(key));
  if (it == j.end() || it->is_null()) return default_value;
  if (!it->is_boolean()) {
    return absl::InvalidArgumentError(std::string(what) + ": field '" + std::string(key) +
                                      "' must be a boolean");
  }
  return it->get<bool>();
}

absl::StatusOr<int64_t> GetInt(const Json& j, std::string_view key, std::string_view what) {
  auto it = j.find(std::string(key));
  if (it == j.end() || !it->is_number_integer()) {
    return absl::InvalidArgumentError(std::string(what) + ": field '" + std::string(key) +
                                      "' must be an integer");
  }
  return it->get<int64_t>();
}

absl::StatusOr<std::string> GetType(const Json& j, std::string_view what) {
  if (!j.is_object()) {
    return absl::InvalidArgumentError(std::string(what) + " must be a JSON object");
  }
  return GetString(j, "type", what);
}

absl::StatusOr<Json> ParseJson(std::string_view text, std::string_view what) {
  Json j = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    return absl::InvalidArgumentError(std::string(what) + " is not valid JSON");
  }
  return j;
}

}  // namespace weir::tokenizer
