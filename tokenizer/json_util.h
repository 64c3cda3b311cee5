// tokenizer/json_util.h
//
// Strict accessors for tokenizer.json objects: every loader checks that an
// object has only the fields it understands, so a newer or unexpected file
// fails with an error that names the field instead of being half-understood.
//
// Thread safety: pure functions; thread-safe.

#ifndef WEIR_TOKENIZER_JSON_UTIL_H_
#define WEIR_TOKENIZER_JSON_UTIL_H_

#include <initializer_list>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace weir::tokenizer {

using Json = nlohmann::json;

// INVALID_ARGUMENT naming `what` unless `j` is an object whose keys are all in
// `allowed`.
absl::Status CheckFields(const Json& j, std::initializer_list<std::string_view> allowed,
                         std::string_view what);

// Returns field `key` of object `j` as a string / bool / integer.
// INVALID_ARGUMENT if it is missing (and no default is given) or mistyped.
absl::StatusOr<std::string> GetString(const Json& j, std::string_view key, std::string_view what);
absl::StatusOr<bool> GetBool(const Json& j, std::string_view key, std::string_view what,
                             bool default_value);
absl::StatusOr<int64_t> GetInt(const Json& j, std::string_view key, std::string_view what);

// Returns the "type" field of a component object.
absl::StatusOr<std::string> GetType(const Json& j, std::string_view what);

// Parses `text` as JSON. INVALID_ARGUMENT with the parser's message on error.
absl::StatusOr<Json> ParseJson(std::string_view text, std::string_view what);

}  // namespace weir::tokenizer

#endif  // WEIR_TOKENIZER_JSON_UTIL_H_
