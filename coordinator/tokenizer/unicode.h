// coordinator/tokenizer/unicode.h
//
// UTF-8 helpers and Unicode properties used by the tokenizer: lossy UTF-8
// repair with the "maximal subpart" rule (the rule of Rust's from_utf8_lossy and
// of WHATWG decoders), normalization forms through utf8proc, and the character
// classes that the Hugging Face pipeline tests with Rust's `char` methods.
//
// Thread safety: all functions are pure and thread-safe.

#ifndef WEIR_COORDINATOR_TOKENIZER_UNICODE_H_
#define WEIR_COORDINATOR_TOKENIZER_UNICODE_H_

#include <cstddef>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace weir::tokenizer {

inline constexpr char32_t kReplacementChar = 0xFFFD;

// Returns true if `text` is well-formed UTF-8 (no surrogates, no overlongs).
bool IsValidUtf8(std::string_view text);

// Returns `text` with every ill-formed subsequence replaced by U+FFFD, one
// replacement per maximal subpart.
std::string SanitizeUtf8(std::string_view text);

// Decodes the code point starting at `text[pos]` into `*cp` and returns its
// length in bytes. REQUIRES: `text` is valid UTF-8 and pos < text.size().
int DecodeUtf8(std::string_view text, size_t pos, char32_t* cp);

// Appends the UTF-8 encoding of `cp` to `out`.
void AppendUtf8(char32_t cp, std::string& out);

enum class NormalForm { kNfc, kNfd, kNfkc, kNfkd };

// Returns `text` in normal form `form`. INVALID_ARGUMENT if `text` is not
// valid UTF-8.
absl::StatusOr<std::string> Normalize(std::string_view text, NormalForm form);

// Rust `char::is_whitespace`: the Unicode White_Space property.
bool IsWhitespace(char32_t cp);
// Rust `char::is_numeric`: general categories Nd, Nl, No.
bool IsNumeric(char32_t cp);
// Regex `\w` in Unicode mode: letters, marks, decimal digits, connector
// punctuation, letter numbers, and the joiners U+200C/U+200D.
bool IsWordChar(char32_t cp);
// General category M (Mn, Mc, Me): what Hugging Face's StripAccents removes.
bool IsMark(char32_t cp);

// Returns `text` lowercased character by character with the full mapping
// (Rust `char::to_lowercase`, as Hugging Face's Lowercase normalizer does):
// U+0130 becomes "i\u0307", and there is no final-sigma rule.
// REQUIRES: valid UTF-8.
std::string Lowercase(std::string_view text);

}  // namespace weir::tokenizer

#endif  // WEIR_COORDINATOR_TOKENIZER_UNICODE_H_
