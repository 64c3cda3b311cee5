// grammar/json_schema_converter.h
//
// Internal to the JSON Schema front-end: the converter that walks a parsed
// schema and emits grammar rules. Use json_schema.h instead.
//
// Thread safety: not thread-safe; one converter per conversion.

#ifndef WEIR_GRAMMAR_JSON_SCHEMA_CONVERTER_H_
#define WEIR_GRAMMAR_JSON_SCHEMA_CONVERTER_H_

#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "grammar/grammar.h"
#include "grammar/json_rules.h"
#include "grammar/json_schema.h"
#include "nlohmann/json.hpp"

namespace weir::grammar::internal {

using Json = nlohmann::ordered_json;

// Converts one schema document; Run() may be called once.
class SchemaConverter {
 public:
  SchemaConverter(const Json& root, const JsonSchemaOptions& options)
      : g_(options.limits), rules_(g_, options.whitespace), root_(root), options_(options) {}

  absl::StatusOr<Grammar> Run() {
    const RuleId root = g_.DeclareRule("root");
    ASSIGN_OR_RETURN(ExprId body, Convert(root_, "#", 0));
    g_.DefineRule(root, body);
    g_.set_root(root);
    return std::move(g_);
  }

 private:
  static absl::Status Error(const std::string& path, const std::string& message) {
    return absl::InvalidArgumentError(absl::StrCat("JSON Schema: ", message, " at ", path));
  }

  // Returns the value of a non-negative integer keyword, or `fallback`.
  absl::StatusOr<int32_t> Count(const Json& s, const char* key, int32_t fallback,
                                const std::string& path) {
    auto it = s.find(key);
    if (it == s.end()) return fallback;
    if (!it->is_number_integer() || it->get<int64_t>() < 0) {
      return Error(path, absl::StrCat("'", key, "' must be a non-negative integer"));
    }
    if (it->get<int64_t>() > options_.limits.max_repeat) {
      return TooComplexError(absl::StrCat("'", key, "' above ", options_.limits.max_repeat));
    }
    return static_cast<int32_t>(it->get<int64_t>());
  }

  absl::StatusOr<ExprId> Literal(const Json& value) { return g_.AddString(value.dump()); }

  absl::StatusOr<ExprId> Convert(const Json& s, const std::string& path, int depth);
  absl::StatusOr<ExprId> ConvertBody(const Json& s, const std::string& path, int depth);
  absl::StatusOr<ExprId> Ref(const std::string& ref, const std::string& path, int depth);
  absl::StatusOr<ExprId> Type(const std::string& type, const Json& s, const std::string& path,
                              int depth);
  absl::StatusOr<ExprId> String(const Json& s, const std::string& path);
  absl::StatusOr<ExprId> IntegerBounds(const Json& s, const std::string& path);
  absl::StatusOr<ExprId> Array(const Json& s, const std::string& path, int depth);
  absl::StatusOr<ExprId> Object(const Json& s, const std::string& path, int depth);

  // json_schema_exclusive.cc: what the grammar alone would not keep valid.
  // True if `value` is of a type `s` allows (any, without a type keyword).
  static bool ValueHasType(const Json& s, const Json& value);
  // Follows local $refs and one-branch allOfs; null if unresolvable.
  const Json* Resolve(const Json& s) const;
  // The JSON types (a Kind bit set) values matching `s` can have; all when unknown.
  uint8_t Kinds(const Json& s, int depth) const;
  // True only if no value can match both `a` and `b` (conservative).
  bool Disjoint(const Json& a, const Json& b, int depth) const;
  // INVALID_ARGUMENT naming two 'oneOf' branches that are not provably disjoint.
  absl::Status CheckOneOf(const Json& branches, const std::string& path, int depth) const;
  // A property name next to the declared `props`: any unescaped JSON string
  // except a declared name, so an extra property never repeats one.
  absl::StatusOr<ExprId> ExtraKey(const Json& props);

  Grammar g_;
  JsonRules rules_;
  const Json& root_;
  JsonSchemaOptions options_;
  absl::flat_hash_map<std::string, RuleId> ref_rules_;
};

}  // namespace weir::grammar::internal

#endif  // WEIR_GRAMMAR_JSON_SCHEMA_CONVERTER_H_
