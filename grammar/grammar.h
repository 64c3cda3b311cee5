// grammar/grammar.h
//
// The grammar IR shared by every front-end (EBNF, regex, JSON Schema, choice
// lists): a set of named rules whose bodies are expression trees over BYTES.
// Unicode is lowered to UTF-8 byte sequences by the front-ends, so the IR and
// everything after it only see bytes.
//
// Thread safety: a Grammar is a value; const access from many threads is safe.

#ifndef WEIR_GRAMMAR_GRAMMAR_H_
#define WEIR_GRAMMAR_GRAMMAR_H_

#include <bitset>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace weir::grammar {

using ByteSet = std::bitset<256>;
using ExprId = int32_t;
using RuleId = int32_t;

// Repeat bound meaning "no upper bound".
inline constexpr int32_t kUnbounded = -1;

// Limits every front-end enforces while building. Exceeding one yields
// INVALID_ARGUMENT whose message starts with "GRAMMAR_TOO_COMPLEX".
struct GrammarLimits {
  int64_t max_exprs = 1'000'000;      // expression nodes in the IR
  int32_t max_nesting = 128;          // parser recursion depth (groups, schemas)
  int32_t max_repeat = 4096;          // largest finite bound in {m,n}
  int64_t max_input_bytes = 1 << 20;  // source text size
};

enum class ExprKind : uint8_t {
  kEmpty,    // matches ""
  kBytes,    // one byte from `bytes`
  kSeq,      // children in order
  kAlt,      // any one child
  kRepeat,   // children[0] repeated min..max times (max may be kUnbounded)
  kRuleRef,  // the rule `rule`
};

struct Expr {
  ExprKind kind = ExprKind::kEmpty;
  std::vector<ExprId> children;
  ByteSet bytes;     // kBytes
  RuleId rule = -1;  // kRuleRef
  int32_t min = 0;   // kRepeat
  int32_t max = 0;   // kRepeat
};

struct Rule {
  std::string name;
  ExprId body = -1;  // -1 while declared but not yet defined
};

// A context-free grammar over bytes. Build with the Add* helpers; every helper
// returns GRAMMAR_TOO_COMPLEX once `limits.max_exprs` is exceeded.
//
//   Grammar g;
//   RuleId root = g.DeclareRule("root");
//   ASSIGN_OR_RETURN(ExprId lit, g.AddString("yes"));
//   g.DefineRule(root, lit);
//   g.set_root(root);
class Grammar {
 public:
  explicit Grammar(GrammarLimits limits = {}) : limits_(limits) {}

  absl::StatusOr<ExprId> AddEmpty();
  absl::StatusOr<ExprId> AddBytes(const ByteSet& bytes);
  absl::StatusOr<ExprId> AddByteRange(uint8_t lo, uint8_t hi);
  // Sequence of the literal bytes of `text` ("" gives kEmpty).
  absl::StatusOr<ExprId> AddString(std::string_view text);
  absl::StatusOr<ExprId> AddSeq(std::vector<ExprId> children);
  absl::StatusOr<ExprId> AddAlt(std::vector<ExprId> children);
  // REQUIRES: 0 <= min and (max == kUnbounded or min <= max). Bounds above
  // limits().max_repeat yield GRAMMAR_TOO_COMPLEX.
  absl::StatusOr<ExprId> AddRepeat(ExprId child, int32_t min, int32_t max);
  absl::StatusOr<ExprId> AddRuleRef(RuleId rule);

  // Returns the rule named `name`, declaring it (undefined) if new.
  RuleId DeclareRule(std::string_view name);
  // Returns -1 if no rule has this name.
  RuleId FindRule(std::string_view name) const;
  // Creates a rule with a fresh name derived from `hint`.
  RuleId NewRule(std::string_view hint);
  void DefineRule(RuleId rule, ExprId body) { rules_[rule].body = body; }

  // Returns INVALID_ARGUMENT naming the first rule that is referenced but has
  // no body, or if the root is unset.
  absl::Status Validate() const;

  // Human-readable dump, one rule per line (tests and debugging).
  std::string ToString() const;

  void set_root(RuleId root) { root_ = root; }
  RuleId root() const { return root_; }
  const Expr& expr(ExprId id) const { return exprs_[id]; }
  const Rule& rule(RuleId id) const { return rules_[id]; }
  int64_t num_exprs() const { return static_cast<int64_t>(exprs_.size()); }
  int32_t num_rules() const { return static_cast<int32_t>(rules_.size()); }
  const GrammarLimits& limits() const { return limits_; }

 private:
  absl::StatusOr<ExprId> Push(Expr expr);
  std::string ExprToString(ExprId id) const;

  GrammarLimits limits_;
  std::vector<Expr> exprs_;
  std::vector<Rule> rules_;
  absl::flat_hash_map<std::string, RuleId> rule_ids_;
  RuleId root_ = -1;
};

// Returns INVALID_ARGUMENT with the "GRAMMAR_TOO_COMPLEX: " prefix.
absl::Status TooComplexError(std::string_view what);

}  // namespace weir::grammar

#endif  // WEIR_GRAMMAR_GRAMMAR_H_
