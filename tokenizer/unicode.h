// tokenizer/unicode.h
//
// UTF-8 helpers and Unicode properties used by the tokenizer: lossy UTF-8
// repair with the "maximal subpart" rule (the rule of Rust's from_utf8_lossy and
// of WHATWG decoders), normalization forms and lowercase through utf8proc, and
// the general categories (unicode_tables.inc, generated from unicodedata2:
// Unicode 16.0, the version of Hugging Face tokenizers' regex tables) behind
// the character classes and the regex's `\p{..}`.
//
// Thread safety: all functions are pure and thread-safe.

#ifndef WEIR_TOKENIZER_UNICODE_H_
#define WEIR_TOKENIZER_UNICODE_H_

#include <cstddef>
#include <cstdint>
#include <optional>
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

// Unicode general categories; kCn = unassigned.
enum class GeneralCategory : uint8_t {
  kCn, kLu, kLl, kLt, kLm, kLo, kMn, kMc, kMe, kNd, kNl, kNo, kPc, kPd, kPs,
  kPe, kPi, kPf, kPo, kSm, kSc, kSk, kSo, kZs, kZl, kZp, kCc, kCf, kCs, kCo,
};

// Returns the general category of `cp` (Unicode 16.0; kCn past U+10FFFF).
// O(log ranges).
GeneralCategory GetGeneralCategory(char32_t cp);

// Returns the two-letter name of `category`, e.g. "Lu".
std::string_view GeneralCategoryName(GeneralCategory category);

// Returns the Unicode version of GetGeneralCategory, e.g. "16.0.0".
std::string_view UnicodeTablesVersion();

// How Regex makes PCRE2's `\p{name}` (PCRE2's own, older tables) mean the
// general category `name` (a one- or two-letter name) of GetGeneralCategory.
struct RegexCategoryClass {
  // PCRE2 class items, e.g. \x{1C89}-\x{1C8A}\x{A7CB}.
  std::string_view items;
  // false: `items` are the additions to PCRE2's \p{name} (use both);
  // true: `items` are the whole set (use them instead of \p{name}).
  bool full = false;
};

// Returns the class for general category `name`, or nullopt if `name` is not
// a general category name (e.g. a script: PCRE2's own table is used).
std::optional<RegexCategoryClass> RegexCategory(std::string_view name);

// Rust `char::is_whitespace`: the Unicode White_Space property.
bool IsWhitespace(char32_t cp);
// Rust `char::is_numeric`: general categories Nd, Nl, No (Unicode 16.0; Rust
// 1.9x uses 17.0, which only adds code points unassigned in 16.0).
bool IsNumeric(char32_t cp);
// Regex `\w` in Unicode mode: letters, marks, decimal digits, connector
// punctuation, letter numbers, and the joiners U+200C/U+200D.
bool IsWordChar(char32_t cp);
// General category M (Mn, Mc, Me) per utf8proc (Unicode 15.0): what Hugging
// Face's StripAccents removes, up to that crate's older table (README).
bool IsMark(char32_t cp);

// Returns `text` lowercased character by character with the full mapping
// (Rust `char::to_lowercase`, as Hugging Face's Lowercase normalizer does):
// U+0130 becomes "i\u0307", and there is no final-sigma rule.
// REQUIRES: valid UTF-8.
std::string Lowercase(std::string_view text);

}  // namespace weir::tokenizer

#endif  // WEIR_TOKENIZER_UNICODE_H_
