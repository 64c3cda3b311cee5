// grammar/json_schema_converter.cc
//
// Keyword dispatch: combinators, $ref, const/enum, then one alternative per
// type. Each subschema becomes its own rule, so repetitions (minItems,
// maxItems, string lengths) copy only a rule reference.

#include "grammar/json_schema_converter.h"

#include <cmath>
#include <exception>
#include <optional>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"

namespace weir::grammar::internal {
namespace {

const absl::flat_hash_set<std::string>& Annotations() {
  static const auto* set = new absl::flat_hash_set<std::string>{
      "title",  "description", "default",  "examples",  "$schema", "$id",        "$comment",
      "format", "deprecated",  "readOnly", "writeOnly", "$defs",   "definitions"};
  return *set;
}

const absl::flat_hash_set<std::string>& Supported() {
  static const auto* set = new absl::flat_hash_set<std::string>{"type",
                                                                "properties",
                                                                "required",
                                                                "additionalProperties",
                                                                "enum",
                                                                "const",
                                                                "items",
                                                                "minItems",
                                                                "maxItems",
                                                                "anyOf",
                                                                "oneOf",
                                                                "allOf",
                                                                "$ref",
                                                                "pattern",
                                                                "minLength",
                                                                "maxLength",
                                                                "minimum",
                                                                "maximum",
                                                                "exclusiveMinimum",
                                                                "exclusiveMaximum"};
  return *set;
}

}  // namespace

absl::StatusOr<ExprId> SchemaConverter::Convert(const Json& s, const std::string& path, int depth) {
  if (depth > options_.limits.max_nesting) return TooComplexError("JSON Schema nested too deeply");
  if (s.is_boolean()) {
    if (s.get<bool>()) return rules_.AnyValue();
    return Error(path, "schema 'false' matches nothing");
  }
  if (!s.is_object()) return Error(path, "a schema must be an object or a boolean");
  const RuleId rule = g_.NewRule("schema");
  ASSIGN_OR_RETURN(ExprId body, ConvertBody(s, path, depth));
  g_.DefineRule(rule, body);
  return g_.AddRuleRef(rule);
}

absl::StatusOr<ExprId> SchemaConverter::ConvertBody(const Json& s, const std::string& path,
                                                    int depth) {
  std::vector<std::string> constraints;
  for (const auto& [key, value] : s.items()) {
    if (Annotations().contains(key)) continue;
    if (!Supported().contains(key))
      return Error(path, absl::StrCat("unsupported keyword '", key, "'"));
    constraints.push_back(key);
  }
  for (const char* combinator : {"$ref", "anyOf", "oneOf", "allOf", "const", "enum"}) {
    if (!s.contains(combinator)) continue;
    for (const std::string& key : constraints) {
      if (key != combinator && !(key == "type" && (std::string(combinator) == "const" ||
                                                   std::string(combinator) == "enum"))) {
        return Error(path,
                     absl::StrCat("keyword '", key, "' next to '", combinator, "' is unsupported"));
      }
    }
  }
  if (auto it = s.find("$ref"); it != s.end()) {
    if (!it->is_string()) return Error(path, "'$ref' must be a string");
    return Ref(it->get<std::string>(), path, depth);
  }
  // Next to `type`, only the values of that type can match.
  if (auto it = s.find("const"); it != s.end()) {
    if (!ValueHasType(s, *it)) {
      return Error(path, "the 'const' value is not of the 'type' (the schema matches nothing)");
    }
    return Literal(*it);
  }
  if (auto it = s.find("enum"); it != s.end()) {
    if (!it->is_array() || it->empty()) return Error(path, "'enum' must be a non-empty array");
    std::vector<ExprId> alts;
    for (const Json& v : *it) {
      if (!ValueHasType(s, v)) continue;
      ASSIGN_OR_RETURN(ExprId lit, Literal(v));
      alts.push_back(lit);
    }
    if (alts.empty()) {
      return Error(path, "no 'enum' value is of the 'type' (the schema matches nothing)");
    }
    return g_.AddAlt(std::move(alts));
  }
  for (const char* key : {"anyOf", "oneOf", "allOf"}) {
    auto it = s.find(key);
    if (it == s.end()) continue;
    if (!it->is_array() || it->empty()) {
      return Error(path, absl::StrCat("'", key, "' must be a non-empty array"));
    }
    if (std::string(key) == "allOf" && it->size() != 1) {
      return Error(path, "'allOf' with more than one schema is unsupported");
    }
    // Compiled as anyOf, which is exact only for disjoint branches.
    if (std::string(key) == "oneOf") RETURN_IF_ERROR(CheckOneOf(*it, path, depth));
    std::vector<ExprId> alts;
    for (size_t i = 0; i < it->size(); ++i) {
      ASSIGN_OR_RETURN(ExprId sub,
                       Convert((*it)[i], absl::StrCat(path, "/", key, "/", i), depth + 1));
      alts.push_back(sub);
    }
    return g_.AddAlt(std::move(alts));
  }
  std::vector<std::string> types;
  if (auto it = s.find("type"); it != s.end()) {
    if (it->is_string()) {
      types.push_back(it->get<std::string>());
    } else if (it->is_array() && !it->empty()) {
      for (const Json& t : *it) {
        if (!t.is_string()) return Error(path, "'type' entries must be strings");
        types.push_back(t.get<std::string>());
      }
    } else {
      return Error(path, "'type' must be a string or a non-empty array");
    }
  } else if (s.contains("properties") || s.contains("required") ||
             s.contains("additionalProperties")) {
    types.push_back("object");
  } else if (s.contains("items") || s.contains("minItems") || s.contains("maxItems")) {
    types.push_back("array");
  } else if (s.contains("pattern") || s.contains("minLength") || s.contains("maxLength")) {
    types.push_back("string");
  } else {
    return rules_.AnyValue();
  }
  std::vector<ExprId> alts;
  for (const std::string& t : types) {
    ASSIGN_OR_RETURN(ExprId e, Type(t, s, path, depth));
    alts.push_back(e);
  }
  return g_.AddAlt(std::move(alts));
}

absl::StatusOr<ExprId> SchemaConverter::Ref(const std::string& ref, const std::string& path,
                                            int depth) {
  if (auto it = ref_rules_.find(ref); it != ref_rules_.end()) return g_.AddRuleRef(it->second);
  if (ref.empty() || ref[0] != '#') {
    return Error(path, absl::StrCat("only local '$ref' is supported, got '", ref, "'"));
  }
  const Json* target = &root_;
  if (ref != "#") {
    try {
      const nlohmann::json_pointer<std::string> pointer(ref.substr(1));
      if (!root_.contains(pointer))
        return Error(path, absl::StrCat("unresolvable $ref '", ref, "'"));
      target = &root_.at(pointer);
    } catch (const std::exception&) {
      return Error(path, absl::StrCat("malformed $ref '", ref, "'"));
    }
  }
  const RuleId rule = g_.NewRule("ref");
  ref_rules_.emplace(ref, rule);
  ASSIGN_OR_RETURN(ExprId body, Convert(*target, ref, depth + 1));
  g_.DefineRule(rule, body);
  return g_.AddRuleRef(rule);
}

absl::StatusOr<ExprId> SchemaConverter::IntegerBounds(const Json& s, const std::string& path) {
  std::optional<int64_t> lo, hi;
  // Bounds beyond +-1e18 are clamped by IntegerRange (18-digit integers).
  auto clamp = [](double v) { return static_cast<int64_t>(std::clamp(v, -1e18, 1e18)); };
  for (const char* key : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}) {
    auto it = s.find(key);
    if (it == s.end()) continue;
    if (!it->is_number()) return Error(path, absl::StrCat("'", key, "' must be a number"));
    const double v = it->get<double>();
    const std::string k = key;
    if (k == "minimum") lo = std::max(lo.value_or(INT64_MIN), clamp(std::ceil(v)));
    if (k == "exclusiveMinimum") lo = std::max(lo.value_or(INT64_MIN), clamp(std::floor(v) + 1));
    if (k == "maximum") hi = std::min(hi.value_or(INT64_MAX), clamp(std::floor(v)));
    if (k == "exclusiveMaximum") hi = std::min(hi.value_or(INT64_MAX), clamp(std::ceil(v) - 1));
  }
  auto range = rules_.IntegerRange(lo, hi);
  if (!range.ok() && range.status().code() == absl::StatusCode::kInvalidArgument &&
      range.status().message().find("GRAMMAR_TOO_COMPLEX") == absl::string_view::npos) {
    return Error(path, std::string(range.status().message()));
  }
  return range;
}

absl::StatusOr<ExprId> SchemaConverter::Type(const std::string& type, const Json& s,
                                             const std::string& path, int depth) {
  if (type == "string") return String(s, path);
  const bool bounded = s.contains("minimum") || s.contains("maximum") ||
                       s.contains("exclusiveMinimum") || s.contains("exclusiveMaximum");
  if (type == "integer") return bounded ? IntegerBounds(s, path) : rules_.Integer();
  if (type == "number") {
    if (bounded) return Error(path, "numeric bounds on type 'number' are unsupported");
    return rules_.Number();
  }
  if (type == "boolean") return rules_.Boolean();
  if (type == "null") return rules_.Null();
  if (type == "array") return Array(s, path, depth);
  if (type == "object") return Object(s, path, depth);
  return Error(path, absl::StrCat("unknown type '", type, "'"));
}

}  // namespace weir::grammar::internal
