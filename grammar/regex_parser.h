// grammar/regex_parser.h
//
// Regex front-end: the common subset of ECMAScript/PCRE syntax, as a full
// match (implicitly anchored at both ends), lowered to the grammar IR over
// UTF-8 bytes. Also: choice lists (one of several literal strings).
//
// Supported: literals (UTF-8 code points), escapes (\n \t \r \f \v \0 \xHH
// \uHHHH, escaped punctuation), classes [a-z] [^...] with \d \w \s inside,
// `.` (any code point but \n), \d \D \w \W \s \S, groups ( ) (?: ) (?<name> ),
// alternation |, quantifiers * + ? {m} {m,} {m,n} (lazy forms accepted; same
// language), and ^ / $ only at the very start / end. Rejected with
// INVALID_ARGUMENT naming the construct: backreferences, lookaround, \b, \B,
// anchors elsewhere.
//
// Thread safety: pure functions.

#ifndef WEIR_GRAMMAR_REGEX_PARSER_H_
#define WEIR_GRAMMAR_REGEX_PARSER_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "grammar/grammar.h"
#include "grammar/utf8.h"

namespace weir::grammar {

struct RegexOptions {
  // If non-empty, every code point the regex may match is intersected with
  // these ranges (the JSON Schema front-end excludes '"', '\\' and controls).
  std::vector<CodepointRange> allowed;
  // Search semantics (JSON Schema `pattern`): an unanchored start or end
  // matches any allowed text before or after.
  bool search = false;
};

// Adds an expression for `pattern` to `grammar` and returns it. Errors:
// INVALID_ARGUMENT with the byte position; GRAMMAR_TOO_COMPLEX past limits.
absl::StatusOr<ExprId> AddRegex(Grammar& grammar, std::string_view pattern,
                                const RegexOptions& options = {});

// Returns a grammar whose root fully matches `pattern`.
absl::StatusOr<Grammar> ParseRegex(std::string_view pattern, const GrammarLimits& limits = {});

// Returns a grammar matching exactly one of `choices`. INVALID_ARGUMENT if
// empty; GRAMMAR_TOO_COMPLEX past limits.
absl::StatusOr<Grammar> ChoicesToGrammar(const std::vector<std::string>& choices,
                                         const GrammarLimits& limits = {});

}  // namespace weir::grammar

#endif  // WEIR_GRAMMAR_REGEX_PARSER_H_
