// grammar/json_schema_types.cc
//
// Strings, arrays and objects. Objects use two rule chains over the declared
// properties: F[i] ("nothing written yet, continue from property i") and
// R[i] ("something written, continue from i"), which puts commas exactly
// between present properties in linear size.

#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "grammar/json_schema_converter.h"
#include "grammar/regex_parser.h"

namespace weir::grammar::internal {

absl::StatusOr<ExprId> SchemaConverter::String(const Json& s, const std::string& path) {
  ASSIGN_OR_RETURN(int32_t min, Count(s, "minLength", 0, path));
  ASSIGN_OR_RETURN(int32_t max, Count(s, "maxLength", kUnbounded, path));
  if (max != kUnbounded && max < min) return Error(path, "maxLength below minLength");
  ASSIGN_OR_RETURN(ExprId open, g_.AddString("\""));
  ASSIGN_OR_RETURN(ExprId close, g_.AddString("\""));
  if (auto it = s.find("pattern"); it != s.end()) {
    if (!it->is_string()) return Error(path, "'pattern' must be a string");
    if (s.contains("minLength") || s.contains("maxLength")) {
      return Error(path, "'pattern' together with 'minLength'/'maxLength' is unsupported");
    }
    RegexOptions regex_options;
    regex_options.allowed = JsonRules::PlainStringChars();
    regex_options.search = true;
    auto body = AddRegex(g_, it->get<std::string>(), regex_options);
    if (!body.ok()) {
      return absl::Status(body.status().code(), absl::StrCat("JSON Schema: 'pattern' at ", path,
                                                             ": ", body.status().message()));
    }
    return g_.AddSeq({open, *body, close});
  }
  if (min == 0 && max == kUnbounded) return rules_.String();
  ASSIGN_OR_RETURN(ExprId c, rules_.Char());
  ASSIGN_OR_RETURN(ExprId body, g_.AddRepeat(c, min, max));
  return g_.AddSeq({open, body, close});
}

absl::StatusOr<ExprId> SchemaConverter::Array(const Json& s, const std::string& path, int depth) {
  ASSIGN_OR_RETURN(int32_t min, Count(s, "minItems", 0, path));
  ASSIGN_OR_RETURN(int32_t max, Count(s, "maxItems", kUnbounded, path));
  if (max != kUnbounded && max < min) return Error(path, "maxItems below minItems");
  ExprId item;
  if (auto it = s.find("items"); it != s.end()) {
    if (it->is_array()) return Error(path, "array-form 'items' is unsupported");
    ASSIGN_OR_RETURN(item, Convert(*it, path + "/items", depth + 1));
  } else {
    ASSIGN_OR_RETURN(item, rules_.AnyValue());
  }
  return rules_.List('[', item, min, max, ']');
}

absl::StatusOr<ExprId> SchemaConverter::Object(const Json& s, const std::string& path, int depth) {
  static const Json kEmpty = Json::object();
  const Json* props = &kEmpty;
  if (auto it = s.find("properties"); it != s.end()) {
    if (!it->is_object()) return Error(path, "'properties' must be an object");
    props = &*it;
  }
  absl::flat_hash_set<std::string> required;
  if (auto it = s.find("required"); it != s.end()) {
    if (!it->is_array()) return Error(path, "'required' must be an array");
    for (const Json& name : *it) {
      if (!name.is_string()) return Error(path, "'required' entries must be strings");
      if (!props->contains(name.get<std::string>())) {
        return Error(path, absl::StrCat("required property '", name.get<std::string>(),
                                        "' is not in 'properties' (unsupported)"));
      }
      required.insert(name.get<std::string>());
    }
  }
  // The pair for extra properties, or -1 if none are allowed.
  ExprId extra = -1;
  auto additional = s.find("additionalProperties");
  if (additional == s.end() ? !options_.strict_properties
                            : !(additional->is_boolean() && !additional->get<bool>())) {
    ExprId value;
    if (additional == s.end() || additional->is_boolean()) {
      ASSIGN_OR_RETURN(value, rules_.AnyValue());
    } else {
      ASSIGN_OR_RETURN(value, Convert(*additional, path + "/additionalProperties", depth + 1));
    }
    // A parser keeps the last of duplicate names, so an extra property must
    // not repeat a declared one (its value would escape that schema).
    ExprId key;
    if (props->empty()) {
      ASSIGN_OR_RETURN(key, rules_.String());
    } else {
      ASSIGN_OR_RETURN(key, ExtraKey(*props));
    }
    ASSIGN_OR_RETURN(extra, rules_.Pair(key, value));
  }
  std::vector<std::pair<ExprId, bool>> pairs;  // (pair, required)
  for (const auto& [name, sub] : props->items()) {
    ASSIGN_OR_RETURN(ExprId key, Literal(Json(name)));
    ASSIGN_OR_RETURN(ExprId value,
                     Convert(sub, absl::StrCat(path, "/properties/", name), depth + 1));
    ASSIGN_OR_RETURN(ExprId pair, rules_.Pair(key, value));
    pairs.emplace_back(pair, required.contains(name));
  }
  const size_t n = pairs.size();
  std::vector<RuleId> rest(n + 1), first(n + 1);
  for (size_t i = 0; i <= n; ++i) {
    rest[i] = g_.NewRule("props_rest");
    first[i] = g_.NewRule("props_first");
  }
  ASSIGN_OR_RETURN(ExprId comma, rules_.Punct(','));
  if (extra >= 0) {
    ASSIGN_OR_RETURN(ExprId more, g_.AddSeq({comma, extra}));
    ASSIGN_OR_RETURN(ExprId more_star, g_.AddRepeat(more, 0, kUnbounded));
    g_.DefineRule(rest[n], more_star);
    ASSIGN_OR_RETURN(ExprId rest_ref, g_.AddRuleRef(rest[n]));
    ASSIGN_OR_RETURN(ExprId some, g_.AddSeq({extra, rest_ref}));
    ASSIGN_OR_RETURN(ExprId some_opt, g_.AddRepeat(some, 0, 1));
    g_.DefineRule(first[n], some_opt);
  } else {
    ASSIGN_OR_RETURN(ExprId empty, g_.AddEmpty());
    g_.DefineRule(rest[n], empty);
    g_.DefineRule(first[n], empty);
  }
  for (size_t i = n; i-- > 0;) {
    const auto [pair, is_required] = pairs[i];
    ASSIGN_OR_RETURN(ExprId rest_next, g_.AddRuleRef(rest[i + 1]));
    ASSIGN_OR_RETURN(ExprId with_comma, g_.AddSeq({comma, pair, rest_next}));
    ASSIGN_OR_RETURN(ExprId without_comma, g_.AddSeq({pair, rest_next}));
    if (is_required) {
      g_.DefineRule(rest[i], with_comma);
      g_.DefineRule(first[i], without_comma);
    } else {
      ASSIGN_OR_RETURN(ExprId skip_rest, g_.AddRuleRef(rest[i + 1]));
      ASSIGN_OR_RETURN(ExprId skip_first, g_.AddRuleRef(first[i + 1]));
      ASSIGN_OR_RETURN(ExprId r, g_.AddAlt({with_comma, skip_rest}));
      ASSIGN_OR_RETURN(ExprId f, g_.AddAlt({without_comma, skip_first}));
      g_.DefineRule(rest[i], r);
      g_.DefineRule(first[i], f);
    }
  }
  ASSIGN_OR_RETURN(ExprId open, rules_.Punct('{'));
  ASSIGN_OR_RETURN(ExprId body, g_.AddRuleRef(first[0]));
  ASSIGN_OR_RETURN(ExprId close, rules_.Punct('}'));
  return g_.AddSeq({open, body, close});
}

}  // namespace weir::grammar::internal
