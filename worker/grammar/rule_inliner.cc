// worker/grammar/rule_inliner.cc

#include "worker/grammar/rule_inliner.h"

#include <algorithm>

namespace weir::grammar {
namespace {

constexpr int64_t kCap = int64_t{1} << 40;  // sizes saturate here

void CollectRefs(const Grammar& g, ExprId id, std::vector<RuleId>* out) {
  std::vector<ExprId> stack = {id};
  while (!stack.empty()) {
    const Expr& e = g.expr(stack.back());
    stack.pop_back();
    if (e.kind == ExprKind::kRuleRef) out->push_back(e.rule);
    for (ExprId c : e.children) stack.push_back(c);
  }
}

class SizeEstimator {
 public:
  SizeEstimator(const Grammar& g, const std::vector<bool>& recursive, int64_t max_nodes)
      : g_(g),
        recursive_(recursive),
        max_nodes_(max_nodes),
        rule_size_(g.num_rules(), -1),
        inline_(g.num_rules(), false) {}

  // Size of rule `r` when inlined; decides inline_[r]. Rules form a DAG
  // among non-recursive ones, so the recursion terminates.
  int64_t RuleSize(RuleId r) {
    if (rule_size_[r] >= 0) return rule_size_[r];
    rule_size_[r] = kCap;  // guards against cycles (recursive rules never inline)
    const int64_t size = recursive_[r] ? kCap : ExprSize(g_.rule(r).body);
    rule_size_[r] = size;
    inline_[r] = !recursive_[r] && size <= max_nodes_ && r != g_.root();
    return size;
  }

  std::vector<bool> Run() {
    for (RuleId r = 0; r < g_.num_rules(); ++r) RuleSize(r);
    return inline_;
  }

 private:
  int64_t ExprSize(ExprId id) {
    const Expr& e = g_.expr(id);
    switch (e.kind) {
      case ExprKind::kEmpty:
        return 0;
      case ExprKind::kBytes:
        return 1;
      case ExprKind::kRuleRef:
        RuleSize(e.rule);
        return inline_[e.rule] ? rule_size_[e.rule] : 1;
      case ExprKind::kSeq:
      case ExprKind::kAlt: {
        int64_t total = 1;
        for (ExprId c : e.children) total = std::min(kCap, total + ExprSize(c));
        return total;
      }
      case ExprKind::kRepeat: {
        const int64_t copies = e.max == kUnbounded ? e.min + 1 : std::max(e.max, 1);
        const int64_t child = ExprSize(e.children[0]);
        return child > kCap / (copies + 1) ? kCap : child * copies + 1;
      }
    }
    return kCap;
  }

  const Grammar& g_;
  const std::vector<bool>& recursive_;
  int64_t max_nodes_;
  std::vector<int64_t> rule_size_;
  std::vector<bool> inline_;
};

}  // namespace

std::vector<bool> InlinableRules(const Grammar& grammar, int64_t max_nodes) {
  const int32_t n = grammar.num_rules();
  std::vector<std::vector<RuleId>> refs(n);
  for (RuleId r = 0; r < n; ++r) CollectRefs(grammar, grammar.rule(r).body, &refs[r]);
  // recursive[r]: r reaches itself. One DFS per rule; grammars have at most
  // a few thousand rules.
  std::vector<bool> recursive(n, false);
  std::vector<int32_t> seen(n, -1), stack;
  for (RuleId r = 0; r < n; ++r) {
    stack.assign(refs[r].begin(), refs[r].end());
    while (!stack.empty() && !recursive[r]) {
      const RuleId x = stack.back();
      stack.pop_back();
      if (x == r) recursive[r] = true;
      if (seen[x] == r) continue;
      seen[x] = r;
      stack.insert(stack.end(), refs[x].begin(), refs[x].end());
    }
  }
  return SizeEstimator(grammar, recursive, max_nodes).Run();
}

}  // namespace weir::grammar
