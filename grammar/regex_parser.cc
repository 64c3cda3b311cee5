// grammar/regex_parser.cc
//
// Recursive descent; depth bounded by limits.max_nesting. Every set of code
// points (literal, class, escape, dot) goes through AddSet, which applies the
// `allowed` filter and lowers to UTF-8.

#include "grammar/regex_parser.h"

#include <cctype>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "grammar/lexing.h"

namespace weir::grammar {
namespace {

const std::vector<CodepointRange> kDigit = {{'0', '9'}};
const std::vector<CodepointRange> kWord = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
const std::vector<CodepointRange> kSpace = {{'\t', '\r'}, {' ', ' '}};

std::vector<CodepointRange> Intersect(const std::vector<CodepointRange>& a,
                                      const std::vector<CodepointRange>& b) {
  std::vector<CodepointRange> out;
  for (const auto& [alo, ahi] : NormalizeRanges(a)) {
    for (const auto& [blo, bhi] : b) {
      const uint32_t lo = std::max(alo, blo), hi = std::min(ahi, bhi);
      if (lo <= hi) out.emplace_back(lo, hi);
    }
  }
  return out;
}

class RegexParser {
 public:
  RegexParser(Grammar& grammar, std::string_view pattern, const RegexOptions& options)
      : g_(grammar), text_(pattern), options_(options) {
    if (!options_.allowed.empty()) options_.allowed = NormalizeRanges(options_.allowed);
  }

  absl::StatusOr<ExprId> Parse() {
    if (static_cast<int64_t>(text_.size()) > g_.limits().max_input_bytes) {
      return TooComplexError("regex too large");
    }
    bool anchored_start = false, anchored_end = false;
    if (!text_.empty() && text_[0] == '^') {
      anchored_start = true;
      ++pos_;
    }
    end_ = text_.size();
    if (end_ > pos_ && text_[end_ - 1] == '$' && !EscapedAt(end_ - 1)) {
      anchored_end = true;
      --end_;
    }
    ASSIGN_OR_RETURN(ExprId body, ParseAlternation(0));
    if (pos_ != end_) return Error("unmatched ')'");
    if (!options_.search) return body;
    std::vector<ExprId> parts;
    const std::vector<CodepointRange> any = {{0, kMaxCodepoint}};
    if (!anchored_start) {
      ASSIGN_OR_RETURN(ExprId set, AddSet(any));
      ASSIGN_OR_RETURN(ExprId star, g_.AddRepeat(set, 0, kUnbounded));
      parts.push_back(star);
    }
    parts.push_back(body);
    if (!anchored_end) {
      ASSIGN_OR_RETURN(ExprId set, AddSet(any));
      ASSIGN_OR_RETURN(ExprId star, g_.AddRepeat(set, 0, kUnbounded));
      parts.push_back(star);
    }
    return g_.AddSeq(std::move(parts));
  }

 private:
  absl::Status Error(std::string_view message) const {
    return ErrorAt("regex", text_, pos_, message);
  }

  // True if text_[i] is preceded by an odd number of backslashes.
  bool EscapedAt(size_t i) const {
    size_t n = 0;
    while (i > n && text_[i - n - 1] == '\\') ++n;
    return n % 2 == 1;
  }

  absl::StatusOr<ExprId> AddSet(std::vector<CodepointRange> ranges) {
    if (!options_.allowed.empty()) ranges = Intersect(ranges, options_.allowed);
    return AddCodepointRanges(g_, ranges);
  }

  absl::StatusOr<ExprId> ParseAlternation(int depth) {
    if (depth > g_.limits().max_nesting) return TooComplexError("regex nesting too deep");
    std::vector<ExprId> alts;
    while (true) {
      std::vector<ExprId> seq;
      while (pos_ < end_ && text_[pos_] != '|' && text_[pos_] != ')') {
        ASSIGN_OR_RETURN(ExprId item, ParseQuantified(depth));
        seq.push_back(item);
      }
      ASSIGN_OR_RETURN(ExprId s, g_.AddSeq(std::move(seq)));
      alts.push_back(s);
      if (pos_ < end_ && text_[pos_] == '|') {
        ++pos_;
        continue;
      }
      return g_.AddAlt(std::move(alts));
    }
  }

  // Parses "{m}", "{m,}" or "{m,n}" at pos_; returns false (pos_ unchanged)
  // if the text there is not a quantifier, in which case '{' is a literal.
  absl::StatusOr<bool> ParseBraces(int32_t* lo, int32_t* hi) {
    size_t p = pos_ + 1;
    auto read = [&](int32_t* out) -> absl::StatusOr<bool> {
      const size_t start = p;
      int64_t v = 0;
      while (p < end_ && std::isdigit(static_cast<unsigned char>(text_[p]))) {
        v = v * 10 + (text_[p++] - '0');
        if (v > g_.limits().max_repeat) return TooComplexError("regex repetition bound too large");
      }
      *out = static_cast<int32_t>(v);
      return p > start;
    };
    ASSIGN_OR_RETURN(bool has_lo, read(lo));
    if (!has_lo) return false;
    *hi = *lo;
    if (p < end_ && text_[p] == ',') {
      ++p;
      ASSIGN_OR_RETURN(bool has_hi, read(hi));
      if (!has_hi) *hi = kUnbounded;
    }
    if (p >= end_ || text_[p] != '}') return false;
    if (*hi != kUnbounded && *hi < *lo) return Error("repetition maximum below minimum");
    pos_ = p + 1;
    return true;
  }

  absl::StatusOr<ExprId> ParseQuantified(int depth) {
    ASSIGN_OR_RETURN(ExprId item, ParseAtom(depth));
    while (pos_ < end_) {
      int32_t lo, hi;
      const char c = text_[pos_];
      if (c == '*' || c == '+' || c == '?') {
        ++pos_;
        lo = c == '+' ? 1 : 0;
        hi = c == '?' ? 1 : kUnbounded;
      } else if (c == '{') {
        ASSIGN_OR_RETURN(bool is_quantifier, ParseBraces(&lo, &hi));
        if (!is_quantifier) break;
      } else {
        break;
      }
      if (pos_ < end_ && text_[pos_] == '?') ++pos_;  // lazy: same language
      if (pos_ < end_ && text_[pos_] == '+') return Error("possessive quantifiers are unsupported");
      ASSIGN_OR_RETURN(item, g_.AddRepeat(item, lo, hi));
    }
    return item;
  }

  absl::StatusOr<ExprId> ParseAtom(int depth) {
    const char c = text_[pos_];
    switch (c) {
      case '(': {
        ++pos_;
        if (text_.substr(pos_, 2) == "?:") {
          pos_ += 2;
        } else if (text_.substr(pos_, 2) == "?<" && text_.substr(pos_, 3) != "?<=" &&
                   text_.substr(pos_, 3) != "?<!") {
          pos_ = text_.find('>', pos_);
          if (pos_ == std::string_view::npos || pos_ >= end_) {
            pos_ = end_;
            return Error("unterminated group name");
          }
          ++pos_;
        } else if (text_.substr(pos_, 3) == "?P<") {
          pos_ = text_.find('>', pos_);
          if (pos_ == std::string_view::npos || pos_ >= end_) {
            pos_ = end_;
            return Error("unterminated group name");
          }
          ++pos_;
        } else if (pos_ < end_ && text_[pos_] == '?') {
          return Error("lookaround and inline flags are unsupported");
        }
        ASSIGN_OR_RETURN(ExprId inner, ParseAlternation(depth + 1));
        if (pos_ >= end_ || text_[pos_] != ')') return Error("expected ')'");
        ++pos_;
        return inner;
      }
      case '[':
        return ParseClass();
      case '.':
        ++pos_;
        return AddSet({{0, '\n' - 1}, {'\n' + 1, kMaxCodepoint}});
      case '*':
      case '+':
      case '?':
        return Error("quantifier without an operand");
      case '^':
      case '$':
        return Error("anchors are only supported at the start and end");
      case '\\': {
        std::vector<CodepointRange> ranges;
        ASSIGN_OR_RETURN(bool is_class, ParseClassEscape(&ranges));
        if (is_class) return AddSet(std::move(ranges));
        ASSIGN_OR_RETURN(uint32_t cp, ParseEscape());
        return AddSet({{cp, cp}});
      }
      default: {
        const int32_t cp = DecodeUtf8(text_, &pos_);
        if (cp < 0) return ErrorAt("regex", text_, pos_ - 1, "invalid UTF-8");
        return AddSet({{static_cast<uint32_t>(cp), static_cast<uint32_t>(cp)}});
      }
    }
  }

  // Handles \d \D \w \W \s \S at pos_ (a backslash).
  absl::StatusOr<bool> ParseClassEscape(std::vector<CodepointRange>* out) {
    if (pos_ + 1 >= end_) return false;
    const char c = text_[pos_ + 1];
    const std::vector<CodepointRange>* base = nullptr;
    switch (std::tolower(static_cast<unsigned char>(c))) {
      case 'd':
        base = &kDigit;
        break;
      case 'w':
        base = &kWord;
        break;
      case 's':
        base = &kSpace;
        break;
      default:
        return false;
    }
    pos_ += 2;
    *out = std::isupper(static_cast<unsigned char>(c)) ? ComplementRanges(*base) : *base;
    return true;
  }

  absl::StatusOr<uint32_t> ParseEscape() {
    if (pos_ + 1 < end_) {
      const char c = text_[pos_ + 1];
      if (c == 'b' || c == 'B') return Error("word boundaries are unsupported");
      if (c >= '1' && c <= '9') return Error("backreferences are unsupported");
    }
    if (pos_ + 1 >= end_) return Error("trailing backslash");
    const int32_t cp = ParseCommonEscape(text_.substr(0, end_), &pos_);
    if (cp < 0) return Error("invalid escape");
    return static_cast<uint32_t>(cp);
  }

  absl::StatusOr<ExprId> ParseClass() {
    ++pos_;  // '['
    bool negate = false;
    if (pos_ < end_ && text_[pos_] == '^') {
      negate = true;
      ++pos_;
    }
    std::vector<CodepointRange> ranges;
    bool first = true;
    while (true) {
      if (pos_ >= end_) return Error("unterminated character class");
      if (text_[pos_] == ']' && !first) break;
      first = false;
      if (text_[pos_] == '\\') {
        std::vector<CodepointRange> sub;
        ASSIGN_OR_RETURN(bool is_class, ParseClassEscape(&sub));
        if (is_class) {
          ranges.insert(ranges.end(), sub.begin(), sub.end());
          continue;
        }
      }
      ASSIGN_OR_RETURN(uint32_t lo, ClassChar());
      uint32_t hi = lo;
      if (pos_ + 1 < end_ && text_[pos_] == '-' && text_[pos_ + 1] != ']') {
        ++pos_;
        ASSIGN_OR_RETURN(hi, ClassChar());
        if (hi < lo) return Error("character range out of order");
      }
      ranges.emplace_back(lo, hi);
    }
    ++pos_;
    if (negate) ranges = ComplementRanges(ranges);
    return AddSet(std::move(ranges));
  }

  absl::StatusOr<uint32_t> ClassChar() {
    if (text_[pos_] == '\\') {
      if (pos_ + 1 < end_ && text_[pos_ + 1] == 'b') {  // \b is backspace in a class
        pos_ += 2;
        return 8;
      }
      return ParseEscape();
    }
    const int32_t cp = DecodeUtf8(text_, &pos_);
    if (cp < 0) return ErrorAt("regex", text_, pos_ - 1, "invalid UTF-8");
    return static_cast<uint32_t>(cp);
  }

  Grammar& g_;
  std::string_view text_;
  RegexOptions options_;
  size_t pos_ = 0;
  size_t end_ = 0;
};

}  // namespace

absl::StatusOr<ExprId> AddRegex(Grammar& grammar, std::string_view pattern,
                                const RegexOptions& options) {
  return RegexParser(grammar, pattern, options).Parse();
}

absl::StatusOr<Grammar> ParseRegex(std::string_view pattern, const GrammarLimits& limits) {
  Grammar g(limits);
  const RuleId root = g.DeclareRule("root");
  ASSIGN_OR_RETURN(ExprId body, AddRegex(g, pattern));
  g.DefineRule(root, body);
  g.set_root(root);
  return g;
}

}  // namespace weir::grammar
