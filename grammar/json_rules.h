// grammar/json_rules.h
//
// Building blocks for JSON grammars: strings, numbers, any value, whitespace.
// JsonRules adds each rule to a Grammar once, on first use, and hands out
// references to it.
//
// Thread safety: not thread-safe; used by one converter at a time.

#ifndef WEIR_GRAMMAR_JSON_RULES_H_
#define WEIR_GRAMMAR_JSON_RULES_H_

#include <cstdint>
#include <optional>

#include "absl/status/statusor.h"
#include "grammar/grammar.h"
#include "grammar/utf8.h"

namespace weir::grammar {

// How much whitespace JSON output may contain between tokens.
enum class JsonWhitespace {
  kCompact,   // none: {"a":1,"b":[2,3]}
  kFlexible,  // any run of space, tab, CR, LF around punctuation
};

class JsonRules {
 public:
  // Does not take ownership; `grammar` must outlive this.
  JsonRules(Grammar& grammar, JsonWhitespace whitespace) : g_(grammar), whitespace_(whitespace) {}

  // Code points allowed unescaped inside a JSON string (no '"', '\\', controls).
  static std::vector<CodepointRange> PlainStringChars();

  absl::StatusOr<ExprId> Whitespace();  // "" when compact
  absl::StatusOr<ExprId> Char();        // one unescaped char or escape sequence
  absl::StatusOr<ExprId> String();      // "..." of any chars
  absl::StatusOr<ExprId> Integer();     // -?(0|[1-9][0-9]{0,17}): fits int64
  // Integers in [lo, hi] (either bound may be absent), no leading zeros, at
  // most 18 digits. INVALID_ARGUMENT if the range is empty.
  absl::StatusOr<ExprId> IntegerRange(std::optional<int64_t> lo, std::optional<int64_t> hi);
  absl::StatusOr<ExprId> Number();  // JSON number
  absl::StatusOr<ExprId> Boolean();
  absl::StatusOr<ExprId> Null();
  absl::StatusOr<ExprId> AnyValue();   // any JSON value
  absl::StatusOr<ExprId> AnyObject();  // any JSON object
  absl::StatusOr<ExprId> AnyArray();   // any JSON array

  // `open` ws [item (ws "," ws item)*] ws `close`, with min..max items
  // (max may be kUnbounded). `item` should be a rule reference.
  absl::StatusOr<ExprId> List(char open, ExprId item, int32_t min, int32_t max, char close);
  // `key` ws ":" ws `value`.
  absl::StatusOr<ExprId> Pair(ExprId key, ExprId value);
  // ws `c` ws.
  absl::StatusOr<ExprId> Punct(char c);

 private:
  // Digit strings of exactly `width` digits (leading zeros allowed) whose
  // value is in [a, b]. REQUIRES: 0 <= a <= b < 10^width.
  absl::StatusOr<ExprId> FixedWidthRange(int64_t a, int64_t b, int width);
  // Unsigned integers in [a, b] without leading zeros. REQUIRES: 0 <= a <= b.
  absl::StatusOr<ExprId> MagnitudeRange(int64_t a, int64_t b);
  // -?(0|[1-9][0-9]*) with at most `max_digits` digits (or kUnbounded).
  absl::StatusOr<ExprId> IntegerPart(int32_t max_digits);
  // Returns a reference to the rule cached in `*slot`, defining it with
  // `build` on first use.
  template <typename Build>
  absl::StatusOr<ExprId> Cached(RuleId* slot, const char* name, Build build);

  Grammar& g_;
  JsonWhitespace whitespace_;
  RuleId ws_ = -1, char_ = -1, string_ = -1, integer_ = -1, number_ = -1, boolean_ = -1, null_ = -1,
         value_ = -1, object_ = -1, array_ = -1;
};

}  // namespace weir::grammar

#endif  // WEIR_GRAMMAR_JSON_RULES_H_
