// grammar/lexing.h
//
// Small pieces shared by the text front-ends (EBNF and regex): positioned
// errors and escape sequences.
//
// Thread safety: pure functions.

#ifndef WEIR_GRAMMAR_LEXING_H_
#define WEIR_GRAMMAR_LEXING_H_

#include <cstdint>
#include <string_view>

#include "absl/status/status.h"

namespace weir::grammar {

// Returns INVALID_ARGUMENT "<what>: at byte <pos> (line L, column C): <message>".
absl::Status ErrorAt(std::string_view what, std::string_view text, size_t pos,
                     std::string_view message);

// Parses the escape whose backslash is at text[*pos] for the escapes common to
// both notations: \n \r \t \f \v \0 \xHH \uHHHH \U{...}/\UHHHHHHHH, and any
// escaped punctuation (\\ \" \] \- \. ...). Advances *pos past the escape and
// returns the code point, or -1 if the escape is unknown or malformed (then
// *pos points at the offending character).
// REQUIRES: text[*pos] == '\\'.
int32_t ParseCommonEscape(std::string_view text, size_t* pos);

}  // namespace weir::grammar

#endif  // WEIR_GRAMMAR_LEXING_H_
