// grammar/grammar.cc

#include "grammar/grammar.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace weir::grammar {

absl::Status TooComplexError(std::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("GRAMMAR_TOO_COMPLEX: ", std::string(what)));
}

absl::StatusOr<ExprId> Grammar::Push(Expr expr) {
  if (num_exprs() >= limits_.max_exprs) {
    return TooComplexError(absl::StrCat("more than ", limits_.max_exprs, " grammar expressions"));
  }
  exprs_.push_back(std::move(expr));
  return static_cast<ExprId>(exprs_.size() - 1);
}

absl::StatusOr<ExprId> Grammar::AddEmpty() { return Push(Expr{}); }

absl::StatusOr<ExprId> Grammar::AddBytes(const ByteSet& bytes) {
  Expr e;
  e.kind = ExprKind::kBytes;
  e.bytes = bytes;
  return Push(std::move(e));
}

absl::StatusOr<ExprId> Grammar::AddByteRange(uint8_t lo, uint8_t hi) {
  ByteSet set;
  for (int b = lo; b <= hi; ++b) set.set(b);
  return AddBytes(set);
}

absl::StatusOr<ExprId> Grammar::AddString(std::string_view text) {
  if (text.empty()) return AddEmpty();
  std::vector<ExprId> parts;
  parts.reserve(text.size());
  for (char c : text) {
    const uint8_t b = static_cast<uint8_t>(c);
    auto id = AddByteRange(b, b);
    if (!id.ok()) return id.status();
    parts.push_back(*id);
  }
  return AddSeq(std::move(parts));
}

absl::StatusOr<ExprId> Grammar::AddSeq(std::vector<ExprId> children) {
  if (children.empty()) return AddEmpty();
  if (children.size() == 1) return children[0];
  Expr e;
  e.kind = ExprKind::kSeq;
  e.children = std::move(children);
  return Push(std::move(e));
}

absl::StatusOr<ExprId> Grammar::AddAlt(std::vector<ExprId> children) {
  if (children.size() == 1) return children[0];
  Expr e;
  e.kind = ExprKind::kAlt;  // an empty alternation matches nothing
  e.children = std::move(children);
  return Push(std::move(e));
}

absl::StatusOr<ExprId> Grammar::AddRepeat(ExprId child, int32_t min, int32_t max) {
  if (min < 0 || (max != kUnbounded && max < min)) {
    return absl::InvalidArgumentError(absl::StrFormat("bad repetition bounds {%d,%d}", min, max));
  }
  if (min > limits_.max_repeat || max > limits_.max_repeat) {
    return TooComplexError(absl::StrCat("repetition bound above ", limits_.max_repeat));
  }
  if (min == 1 && max == 1) return child;
  Expr e;
  e.kind = ExprKind::kRepeat;
  e.children = {child};
  e.min = min;
  e.max = max;
  return Push(std::move(e));
}

absl::StatusOr<ExprId> Grammar::AddRuleRef(RuleId rule) {
  Expr e;
  e.kind = ExprKind::kRuleRef;
  e.rule = rule;
  return Push(std::move(e));
}

RuleId Grammar::FindRule(std::string_view name) const {
  auto it = rule_ids_.find(std::string(name));
  return it == rule_ids_.end() ? -1 : it->second;
}

RuleId Grammar::DeclareRule(std::string_view name) {
  const RuleId found = FindRule(name);
  if (found >= 0) return found;
  rules_.push_back(Rule{std::string(name), -1});
  rule_ids_.emplace(std::string(name), num_rules() - 1);
  return num_rules() - 1;
}

RuleId Grammar::NewRule(std::string_view hint) {
  // '#' cannot appear in an EBNF name, so generated names never collide.
  std::string name = absl::StrCat(std::string(hint), "#", rules_.size());
  rules_.push_back(Rule{name, -1});
  rule_ids_.emplace(std::move(name), num_rules() - 1);
  return num_rules() - 1;
}

absl::Status Grammar::Validate() const {
  if (root_ < 0 || root_ >= num_rules()) return absl::InvalidArgumentError("grammar has no root");
  for (const Rule& r : rules_) {
    if (r.body < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("rule '", r.name, "' is used but not defined"));
    }
  }
  return absl::OkStatus();
}

std::string Grammar::ExprToString(ExprId id) const {
  const Expr& e = exprs_[id];
  switch (e.kind) {
    case ExprKind::kEmpty:
      return "\"\"";
    case ExprKind::kBytes: {
      std::string out = "[";
      for (int b = 0; b < 256; ++b) {
        if (!e.bytes.test(b) || (b > 0 && e.bytes.test(b - 1))) continue;
        int hi = b;
        while (hi < 255 && e.bytes.test(hi + 1)) ++hi;
        absl::StrAppendFormat(&out, "\\x%02x", b);
        if (hi > b) absl::StrAppendFormat(&out, "-\\x%02x", hi);
      }
      return out + "]";
    }
    case ExprKind::kSeq:
    case ExprKind::kAlt: {
      std::string out = "(";
      for (size_t i = 0; i < e.children.size(); ++i) {
        if (i > 0) out += e.kind == ExprKind::kSeq ? " " : " | ";
        out += ExprToString(e.children[i]);
      }
      return out + ")";
    }
    case ExprKind::kRepeat:
      return absl::StrFormat("%s{%d,%s}", ExprToString(e.children[0]), e.min,
                             e.max == kUnbounded ? "" : absl::StrCat(e.max));
    case ExprKind::kRuleRef:
      return rules_[e.rule].name;
  }
  return "?";
}

std::string Grammar::ToString() const {
  std::string out;
  for (const Rule& r : rules_) {
    absl::StrAppend(&out, r.name, " ::= ", r.body < 0 ? "<undefined>" : ExprToString(r.body), "\n");
  }
  return out;
}

}  // namespace weir::grammar
