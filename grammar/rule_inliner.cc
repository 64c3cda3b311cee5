// grammar/rule_inliner.cc

#include "grammar/rule_inliner.h"

#include <algorithm>
#include <utility>

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
  // `depth` bounds the recursion on long chains of rules (hostile input):
  // a rule first reached past kMaxDepth is not inlined.
  int64_t RuleSize(RuleId r, int depth = 0) {
    if (rule_size_[r] >= 0) return rule_size_[r];
    if (depth > kMaxDepth) return rule_size_[r] = kCap;  // decided: not inlined
    rule_size_[r] = kCap;  // guards against cycles (recursive rules never inline)
    const int64_t size = recursive_[r] ? kCap : ExprSize(g_.rule(r).body, depth);
    rule_size_[r] = size;
    inline_[r] = !recursive_[r] && size <= max_nodes_ && r != g_.root();
    return size;
  }

  std::vector<bool> Run() {
    for (RuleId r = 0; r < g_.num_rules(); ++r) RuleSize(r);
    return inline_;
  }

 private:
  static constexpr int kMaxDepth = 64;

  int64_t ExprSize(ExprId id, int depth) {
    const Expr& e = g_.expr(id);
    switch (e.kind) {
      case ExprKind::kEmpty:
        return 0;
      case ExprKind::kBytes:
        return 1;
      case ExprKind::kRuleRef:
        RuleSize(e.rule, depth + 1);
        return inline_[e.rule] ? rule_size_[e.rule] : 1;
      case ExprKind::kSeq:
      case ExprKind::kAlt: {
        int64_t total = 1;
        for (ExprId c : e.children) total = std::min(kCap, total + ExprSize(c, depth));
        return total;
      }
      case ExprKind::kRepeat: {
        const int64_t copies = e.max == kUnbounded ? e.min + 1 : std::max(e.max, 1);
        const int64_t child = ExprSize(e.children[0], depth);
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
  // recursive[r]: r reaches itself, i.e. r is in a strongly connected
  // component with a cycle (Tarjan's algorithm, iterative: O(rules + refs)).
  std::vector<bool> recursive(n, false), on_stack(n, false);
  std::vector<int32_t> index(n, -1), low(n, 0), scc;
  std::vector<std::pair<RuleId, size_t>> frames;
  int32_t counter = 0;
  for (RuleId root = 0; root < n; ++root) {
    if (index[root] >= 0) continue;
    frames.push_back({root, 0});
    index[root] = low[root] = counter++;
    scc.push_back(root);
    on_stack[root] = true;
    while (!frames.empty()) {
      auto& [v, i] = frames.back();
      if (i < refs[v].size()) {
        const RuleId w = refs[v][i++];
        if (w == v) recursive[v] = true;
        if (index[w] < 0) {
          index[w] = low[w] = counter++;
          scc.push_back(w);
          on_stack[w] = true;
          frames.push_back({w, 0});
        } else if (on_stack[w]) {
          low[v] = std::min(low[v], index[w]);
        }
        continue;
      }
      const RuleId done = v;
      frames.pop_back();
      if (!frames.empty()) low[frames.back().first] = std::min(low[frames.back().first], low[done]);
      if (low[done] != index[done]) continue;
      const bool cycle = scc.back() != done;  // more than one rule in the component
      while (true) {
        const RuleId x = scc.back();
        scc.pop_back();
        on_stack[x] = false;
        if (cycle) recursive[x] = true;
        if (x == done) break;
      }
    }
  }
  return SizeEstimator(grammar, recursive, max_nodes).Run();
}

}  // namespace weir::grammar
