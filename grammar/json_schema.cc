// grammar/json_schema.cc

#include "grammar/json_schema.h"

#include <exception>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "grammar/json_schema_converter.h"
#include "nlohmann/json.hpp"

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

// Records where nlohmann's parser failed; accepts everything else.
class ErrorLocator : public nlohmann::json_sax<internal::Json> {
 public:
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override { return true; }
  bool key(string_t&) override { return true; }
  bool end_object() override { return true; }
  bool start_array(std::size_t) override { return true; }
  bool end_array() override { return true; }
  bool parse_error(std::size_t position, const std::string& last_token,
                   const nlohmann::detail::exception&) override {
    // nlohmann counts characters read (1-based); report the 0-based offset
    // like the other front-ends.
    message = absl::StrCat("JSON Schema: malformed JSON at byte ", position > 0 ? position - 1 : 0,
                           " near '", last_token.substr(0, 20), "'");
    return false;
  }
  std::string message = "JSON Schema: malformed JSON";
};

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
  if (schema.is_discarded()) {
    ErrorLocator locator;
    try {
      internal::Json::sax_parse(schema_json.begin(), schema_json.end(), &locator);
    } catch (const std::exception&) {  // the message below is still accurate
    }
    return absl::InvalidArgumentError(locator.message);
  }
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
