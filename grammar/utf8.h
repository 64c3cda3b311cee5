// grammar/utf8.h
//
// UTF-8 helpers for the front-ends: decode one code point, encode one, and
// lower a set of code-point ranges to a byte-level IR expression.
//
// Thread safety: pure functions.

#ifndef WEIR_GRAMMAR_UTF8_H_
#define WEIR_GRAMMAR_UTF8_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "grammar/grammar.h"

namespace weir::grammar {

inline constexpr uint32_t kMaxCodepoint = 0x10FFFF;

// Inclusive code-point range.
using CodepointRange = std::pair<uint32_t, uint32_t>;

// Decodes the code point starting at text[*pos] and advances *pos past it.
// Returns -1 (and advances by one byte) on malformed UTF-8.
// REQUIRES: *pos < text.size().
int32_t DecodeUtf8(std::string_view text, size_t* pos);

// Appends the UTF-8 encoding of `cp` to `out`. REQUIRES: cp <= kMaxCodepoint.
void AppendUtf8(uint32_t cp, std::string* out);

// Sorts and merges `ranges` and removes surrogates (U+D800..U+DFFF).
std::vector<CodepointRange> NormalizeRanges(std::vector<CodepointRange> ranges);

// Returns the complement of `ranges` within [0, kMaxCodepoint] minus surrogates.
std::vector<CodepointRange> ComplementRanges(const std::vector<CodepointRange>& ranges);

// Adds an expression matching exactly the UTF-8 encodings of the code points in
// `ranges` (any order, overlaps allowed). Empty `ranges` matches nothing.
// Errors: GRAMMAR_TOO_COMPLEX from the grammar's expression limit.
absl::StatusOr<ExprId> AddCodepointRanges(Grammar& grammar,
                                          const std::vector<CodepointRange>& ranges);

}  // namespace weir::grammar

#endif  // WEIR_GRAMMAR_UTF8_H_
