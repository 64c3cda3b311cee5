// grammar/constraint.h
//
// Constraint: what a request asks its output to match (the structured-output
// kinds of the public API), and the front-end dispatch to the grammar IR.
//
// Thread safety: values and pure functions.

#ifndef WEIR_GRAMMAR_CONSTRAINT_H_
#define WEIR_GRAMMAR_CONSTRAINT_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "grammar/grammar.h"
#include "grammar/json_rules.h"

namespace weir::grammar {

enum class ConstraintKind {
  kRegex,       // `text` is a regular expression (full match)
  kJsonSchema,  // `text` is a JSON Schema document
  kJsonObject,  // any JSON object; `text` unused
  kEbnf,        // `text` is an EBNF grammar with a `root` rule
  kChoice,      // exactly one of `choices`
};

struct Constraint {
  ConstraintKind kind = ConstraintKind::kRegex;
  std::string text;
  std::vector<std::string> choices;
  JsonWhitespace whitespace = JsonWhitespace::kCompact;  // JSON kinds only

  // A string identifying the constraint exactly (compile-cache key).
  std::string CacheKey() const;
};

// Runs the front-end for `constraint`. Errors: INVALID_ARGUMENT from the
// front-end (syntax, unsupported keyword, GRAMMAR_TOO_COMPLEX past `limits`).
absl::StatusOr<Grammar> ConstraintToGrammar(const Constraint& constraint,
                                            const GrammarLimits& limits);

}  // namespace weir::grammar

#endif  // WEIR_GRAMMAR_CONSTRAINT_H_
