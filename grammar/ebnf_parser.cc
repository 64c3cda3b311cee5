// grammar/ebnf_parser.cc
//
// Recursive descent over the text; every recursion carries a depth bounded by
// limits.max_nesting so hostile input cannot exhaust the stack.

#include "grammar/ebnf_parser.h"

#include <cctype>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "grammar/lexing.h"
#include "grammar/utf8.h"

namespace weir::grammar {
namespace {

bool IsNameChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
}

class EbnfParser {
 public:
  EbnfParser(std::string_view text, const GrammarLimits& limits)
      : text_(text), grammar_(limits), limits_(limits) {}

  absl::StatusOr<Grammar> Parse() {
    if (static_cast<int64_t>(text_.size()) > limits_.max_input_bytes) {
      return TooComplexError("EBNF text too large");
    }
    std::vector<bool> defined;
    SkipSpace();
    while (pos_ < text_.size()) {
      const size_t start = pos_;
      const std::string name = ReadName();
      if (name.empty()) return Error("expected a rule name");
      SkipSpace();
      if (text_.substr(pos_, 3) != "::=") return Error("expected '::=' after rule name");
      pos_ += 3;
      const RuleId rule = grammar_.DeclareRule(name);
      if (grammar_.rule(rule).body >= 0) {
        return ErrorAt("EBNF", text_, start, absl::StrCat("rule '", name, "' defined twice"));
      }
      ASSIGN_OR_RETURN(ExprId body, ParseAlternation(0));
      grammar_.DefineRule(rule, body);
      SkipSpace();
    }
    const RuleId root = grammar_.FindRule("root");
    if (root < 0 || grammar_.rule(root).body < 0) {
      return absl::InvalidArgumentError("EBNF: no 'root' rule");
    }
    grammar_.set_root(root);
    for (RuleId r = 0; r < grammar_.num_rules(); ++r) {
      if (grammar_.rule(r).body < 0) {
        return ErrorAt("EBNF", text_, first_use_[grammar_.rule(r).name],
                       absl::StrCat("undefined rule '", grammar_.rule(r).name, "'"));
      }
    }
    return std::move(grammar_);
  }

 private:
  absl::Status Error(std::string_view message) const {
    return ErrorAt("EBNF", text_, pos_, message);
  }

  void SkipSpace() {
    while (pos_ < text_.size()) {
      const char c = text_[pos_];
      if (c == '#') {
        while (pos_ < text_.size() && text_[pos_] != '\n') ++pos_;
      } else if (std::isspace(static_cast<unsigned char>(c))) {
        ++pos_;
      } else {
        break;
      }
    }
  }

  std::string ReadName() {
    const size_t start = pos_;
    while (pos_ < text_.size() && IsNameChar(text_[pos_])) ++pos_;
    return std::string(text_.substr(start, pos_ - start));
  }

  // True if a `name ::=` starts at pos_ (the end of the current rule body).
  bool AtRuleStart() const {
    size_t p = pos_;
    while (p < text_.size() && IsNameChar(text_[p])) ++p;
    if (p == pos_) return false;
    while (p < text_.size() && (text_[p] == ' ' || text_[p] == '\t')) ++p;
    return text_.substr(p, 3) == "::=";
  }

  absl::StatusOr<ExprId> ParseAlternation(int depth) {
    if (depth > limits_.max_nesting) return TooComplexError("EBNF nesting too deep");
    std::vector<ExprId> alts;
    while (true) {
      ASSIGN_OR_RETURN(ExprId seq, ParseSequence(depth));
      alts.push_back(seq);
      SkipSpace();
      if (pos_ < text_.size() && text_[pos_] == '|') {
        ++pos_;
        continue;
      }
      return grammar_.AddAlt(std::move(alts));
    }
  }

  absl::StatusOr<ExprId> ParseSequence(int depth) {
    std::vector<ExprId> items;
    while (true) {
      SkipSpace();
      if (pos_ >= text_.size() || text_[pos_] == '|' || text_[pos_] == ')' || AtRuleStart()) {
        return grammar_.AddSeq(std::move(items));
      }
      ASSIGN_OR_RETURN(ExprId item, ParsePostfix(depth));
      items.push_back(item);
    }
  }

  absl::StatusOr<ExprId> ParsePostfix(int depth) {
    ASSIGN_OR_RETURN(ExprId item, ParsePrimary(depth));
    while (pos_ < text_.size()) {
      const char c = text_[pos_];
      if (c == '*' || c == '+' || c == '?') {
        ++pos_;
        ASSIGN_OR_RETURN(item,
                         grammar_.AddRepeat(item, c == '+' ? 1 : 0, c == '?' ? 1 : kUnbounded));
      } else if (c == '{') {
        ++pos_;
        ASSIGN_OR_RETURN(int32_t lo, ReadInt());
        int32_t hi = lo;
        if (pos_ < text_.size() && text_[pos_] == ',') {
          ++pos_;
          hi = kUnbounded;
          if (pos_ < text_.size() && text_[pos_] != '}') {
            ASSIGN_OR_RETURN(hi, ReadInt());
          }
        }
        if (pos_ >= text_.size() || text_[pos_] != '}') return Error("expected '}'");
        ++pos_;
        if (hi != kUnbounded && hi < lo) return Error("repetition maximum below minimum");
        ASSIGN_OR_RETURN(item, grammar_.AddRepeat(item, lo, hi));
      } else {
        break;
      }
    }
    return item;
  }

  absl::StatusOr<int32_t> ReadInt() {
    int64_t value = 0;
    const size_t start = pos_;
    while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) {
      value = value * 10 + (text_[pos_++] - '0');
      if (value > limits_.max_repeat) return TooComplexError("EBNF repetition bound too large");
    }
    if (pos_ == start) return Error("expected a number");
    return static_cast<int32_t>(value);
  }

  absl::StatusOr<ExprId> ParsePrimary(int depth) {
    const char c = text_[pos_];
    if (c == '"') return ParseString();
    if (c == '[') return ParseClass();
    if (c == '(') {
      ++pos_;
      ASSIGN_OR_RETURN(ExprId inner, ParseAlternation(depth + 1));
      SkipSpace();
      if (pos_ >= text_.size() || text_[pos_] != ')') return Error("expected ')'");
      ++pos_;
      return inner;
    }
    if (IsNameChar(c)) {
      const size_t start = pos_;
      const std::string name = ReadName();
      first_use_.emplace(name, start);
      return grammar_.AddRuleRef(grammar_.DeclareRule(name));
    }
    return Error(absl::StrCat("unexpected character '", std::string(1, c), "'"));
  }

  // Reads one code point of a literal or class; -1 with an error set on failure.
  absl::StatusOr<uint32_t> ReadChar() {
    if (text_[pos_] == '\\') {
      const int32_t cp = ParseCommonEscape(text_, &pos_);
      if (cp < 0) return Error("invalid escape");
      return static_cast<uint32_t>(cp);
    }
    const int32_t cp = DecodeUtf8(text_, &pos_);
    if (cp < 0) return ErrorAt("EBNF", text_, pos_ - 1, "invalid UTF-8");
    return static_cast<uint32_t>(cp);
  }

  absl::StatusOr<ExprId> ParseString() {
    ++pos_;  // opening quote
    std::string bytes;
    while (true) {
      if (pos_ >= text_.size()) return Error("unterminated string literal");
      if (text_[pos_] == '"') break;
      ASSIGN_OR_RETURN(uint32_t cp, ReadChar());
      AppendUtf8(cp, &bytes);
    }
    ++pos_;
    return grammar_.AddString(bytes);
  }

  absl::StatusOr<ExprId> ParseClass() {
    ++pos_;  // '['
    bool negate = false;
    if (pos_ < text_.size() && text_[pos_] == '^') {
      negate = true;
      ++pos_;
    }
    std::vector<CodepointRange> ranges;
    while (true) {
      if (pos_ >= text_.size()) return Error("unterminated character class");
      if (text_[pos_] == ']') break;
      ASSIGN_OR_RETURN(uint32_t lo, ReadChar());
      uint32_t hi = lo;
      if (pos_ + 1 < text_.size() && text_[pos_] == '-' && text_[pos_ + 1] != ']') {
        ++pos_;
        ASSIGN_OR_RETURN(hi, ReadChar());
        if (hi < lo) return Error("character range out of order");
      }
      ranges.emplace_back(lo, hi);
    }
    ++pos_;
    if (negate) ranges = ComplementRanges(ranges);
    return AddCodepointRanges(grammar_, ranges);
  }

  std::string_view text_;
  size_t pos_ = 0;
  Grammar grammar_;
  GrammarLimits limits_;
  absl::flat_hash_map<std::string, size_t> first_use_;
};

}  // namespace

absl::StatusOr<Grammar> ParseEbnf(std::string_view text, const GrammarLimits& limits) {
  return EbnfParser(text, limits).Parse();
}

}  // namespace weir::grammar
