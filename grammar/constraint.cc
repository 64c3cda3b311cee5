// grammar/constraint.cc

#include "grammar/constraint.h"

#include "absl/strings/str_cat.h"
#include "grammar/ebnf_parser.h"
#include "grammar/json_schema.h"
#include "grammar/regex_parser.h"

namespace weir::grammar {

std::string Constraint::CacheKey() const {
  // Length-prefixed fields, so no two constraints share a key.
  std::string key = absl::StrCat(static_cast<int>(kind), ":", static_cast<int>(whitespace), ":",
                                 text.size(), ":", text);
  for (const std::string& c : choices) absl::StrAppend(&key, "|", c.size(), ":", c);
  return key;
}

absl::StatusOr<Grammar> ConstraintToGrammar(const Constraint& constraint,
                                            const GrammarLimits& limits) {
  JsonSchemaOptions json_options;
  json_options.whitespace = constraint.whitespace;
  json_options.limits = limits;
  switch (constraint.kind) {
    case ConstraintKind::kRegex:
      return ParseRegex(constraint.text, limits);
    case ConstraintKind::kJsonSchema:
      return JsonSchemaToGrammar(constraint.text, json_options);
    case ConstraintKind::kJsonObject:
      return AnyJsonGrammar(/*object_only=*/true, json_options);
    case ConstraintKind::kEbnf:
      return ParseEbnf(constraint.text, limits);
    case ConstraintKind::kChoice:
      return ChoicesToGrammar(constraint.choices, limits);
  }
  return absl::InvalidArgumentError("unknown constraint kind");
}

}  // namespace weir::grammar
