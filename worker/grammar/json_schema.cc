// worker/grammar/json_schema.cc

#include "worker/grammar/json_schema.h"

#include <exception>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "nlohmann/json.hpp"
#include "worker/grammar/json_schema_converter.h"

namespace weir::grammar {
namespace {

// Rejects documents nested deeper than `max_depth` before nlohmann parses
// them (its recursion would otherwise be driven by the input).
bool NestingWithin(std::string_view text, int max_depth) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      if (++depth > max_depth) return false;
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  return true;
}

}  // namespace

absl::StatusOr<Grammar> JsonSchemaToGrammar(std::string_view schema_json,
                                            const JsonSchemaOptions& options) {
  if (static_cast<int64_t>(schema_json.size()) > options.limits.max_input_bytes) {
    return TooComplexError("JSON Schema text too large");
  }
  if (!NestingWithin(schema_json, 4 * options.limits.max_nesting)) {
    return TooComplexError("JSON Schema nested too deeply");
  }
  const internal::Json schema =
      internal::Json::parse(schema_json.begin(), schema_json.end(), nullptr,
                            /*allow_exceptions=*/false);
  if (schema.is_discarded()) return absl::InvalidArgumentError("JSON Schema: malformed JSON");
  try {
    return internal::SchemaConverter(schema, options).Run();
  } catch (const std::exception& e) {  // nlohmann accessors on unexpected shapes
    return absl::InvalidArgumentError(absl::StrCat("JSON Schema: ", e.what()));
  }
}

absl::StatusOr<Grammar> AnyJsonGrammar(bool object_only, const JsonSchemaOptions& options) {
  Grammar g(options.limits);
  JsonRules rules(g, options.whitespace);
  const RuleId root = g.DeclareRule("root");
  ASSIGN_OR_RETURN(ExprId body, object_only ? rules.AnyObject() : rules.AnyValue());
  g.DefineRule(root, body);
  g.set_root(root);
  return g;
}

}  // namespace weir::grammar
