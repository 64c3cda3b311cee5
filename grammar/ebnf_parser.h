// grammar/ebnf_parser.h
//
// EBNF front-end: parses the `root ::= ...` notation into the grammar IR.
//
//   root   ::= "{" ws pair ("," ws pair)* "}"
//   pair   ::= [a-z]+ ":" [0-9]+      # comments run to the end of the line
//   ws     ::= [ \t\n]*
//
// Expressions: "string literals" with escapes, [character classes] with ranges,
// negation [^...] and escapes (code points, lowered to UTF-8), rule names,
// ( grouping ), alternation |, and postfix * + ? {m} {m,} {m,n}. A rule body
// runs until the next `name ::=`. The start rule is `root`.
//
// Thread safety: pure function.

#ifndef WEIR_GRAMMAR_EBNF_PARSER_H_
#define WEIR_GRAMMAR_EBNF_PARSER_H_

#include <string_view>

#include "absl/status/statusor.h"
#include "grammar/grammar.h"

namespace weir::grammar {

// Returns the grammar, or INVALID_ARGUMENT naming the byte position, line and
// column of the first syntax error, an undefined rule, a duplicate rule, or a
// missing `root`. Limits (nesting depth, size) yield GRAMMAR_TOO_COMPLEX.
absl::StatusOr<Grammar> ParseEbnf(std::string_view text, const GrammarLimits& limits = {});

}  // namespace weir::grammar

#endif  // WEIR_GRAMMAR_EBNF_PARSER_H_
