// grammar/pda.cc
//
// Build: Thompson construction per rule (with epsilon edges), epsilon removal,
// then three fixpoints over the result: nullable rules (for the left-recursion
// check), productive nodes (to drop dead ends, so any live stack can always
// finish), and the tail-call flag.

#include "grammar/pda.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "grammar/pda_analysis.h"
#include "grammar/rule_inliner.h"

namespace weir::grammar {

struct RawNode {
  std::vector<int32_t> eps;
  std::vector<std::pair<ByteSet, int32_t>> bytes;
  std::vector<RuleEdge> rules;
  bool final = false;
};

class PdaBuilder {
 public:
  PdaBuilder(const Grammar& g, const PdaLimits& limits) : g_(g), limits_(limits) {}

  absl::StatusOr<Pda> Build() {
    RETURN_IF_ERROR(g_.Validate());
    inline_ = InlinableRules(g_, limits_.max_inline_nodes);
    std::vector<int32_t> raw_start(g_.num_rules());
    for (RuleId r = 0; r < g_.num_rules(); ++r) {
      ASSIGN_OR_RETURN(raw_start[r], NewNode());
      ASSIGN_OR_RETURN(int32_t end, Emit(g_.rule(r).body, raw_start[r]));
      raw_[end].final = true;
    }
    RETURN_IF_ERROR(RemoveEpsilons(raw_start));
    RETURN_IF_ERROR(CheckLeftRecursion(g_, pda_));
    RETURN_IF_ERROR(TrimDeadEnds(g_, limits_, pda_));
    return std::move(pda_);
  }

 private:
  absl::StatusOr<int32_t> NewNode() {
    if (static_cast<int64_t>(raw_.size()) >= limits_.max_nodes) {
      return TooComplexError(absl::StrCat("more than ", limits_.max_nodes, " automaton nodes"));
    }
    raw_.emplace_back();
    return static_cast<int32_t>(raw_.size() - 1);
  }

  // Adds the NFA for `id` starting at `from`; returns its end node.
  absl::StatusOr<int32_t> Emit(ExprId id, int32_t from) {
    const Expr& e = g_.expr(id);
    switch (e.kind) {
      case ExprKind::kEmpty:
        return from;
      case ExprKind::kBytes: {
        ASSIGN_OR_RETURN(int32_t to, NewNode());
        raw_[from].bytes.emplace_back(e.bytes, to);
        return to;
      }
      case ExprKind::kRuleRef: {
        if (inline_[e.rule]) return Emit(g_.rule(e.rule).body, from);
        ASSIGN_OR_RETURN(int32_t to, NewNode());
        raw_[from].rules.push_back(RuleEdge{e.rule, to});
        return to;
      }
      case ExprKind::kSeq: {
        int32_t cur = from;
        for (ExprId c : e.children) {
          ASSIGN_OR_RETURN(cur, Emit(c, cur));
        }
        return cur;
      }
      case ExprKind::kAlt: {
        ASSIGN_OR_RETURN(int32_t to, NewNode());
        for (ExprId c : e.children) {
          ASSIGN_OR_RETURN(int32_t end, Emit(c, from));
          raw_[end].eps.push_back(to);
        }
        return to;
      }
      case ExprKind::kRepeat: {
        int32_t cur = from;
        for (int32_t i = 0; i < e.min; ++i) {
          ASSIGN_OR_RETURN(cur, Emit(e.children[0], cur));
        }
        if (e.max == kUnbounded) {
          ASSIGN_OR_RETURN(int32_t loop, NewNode());
          raw_[cur].eps.push_back(loop);
          ASSIGN_OR_RETURN(int32_t end, Emit(e.children[0], loop));
          raw_[end].eps.push_back(loop);
          return loop;
        }
        ASSIGN_OR_RETURN(int32_t to, NewNode());
        raw_[cur].eps.push_back(to);
        for (int32_t i = e.min; i < e.max; ++i) {
          ASSIGN_OR_RETURN(cur, Emit(e.children[0], cur));
          raw_[cur].eps.push_back(to);
        }
        return to;
      }
    }
    return absl::InternalError("unknown expression kind");
  }

  // Every node's edges become those of its epsilon closure; only rule starts
  // and edge targets survive, renumbered densely.
  absl::Status RemoveEpsilons(const std::vector<int32_t>& raw_start) {
    const int32_t n = static_cast<int32_t>(raw_.size());
    std::vector<int32_t> id(n, -1), order;
    auto keep = [&](int32_t raw) {
      if (id[raw] < 0) {
        id[raw] = static_cast<int32_t>(order.size());
        order.push_back(raw);
      }
      return id[raw];
    };
    pda_.rule_start_.resize(raw_start.size());
    for (size_t r = 0; r < raw_start.size(); ++r) pda_.rule_start_[r] = keep(raw_start[r]);
    pda_.root_ = g_.root();
    std::vector<int32_t> mark(n, -1), stack;
    for (size_t k = 0; k < order.size(); ++k) {  // `order` grows as targets are kept
      PdaNode node;
      node.byte_begin = static_cast<int32_t>(pda_.byte_edges_.size());
      node.rule_begin = static_cast<int32_t>(pda_.rule_edges_.size());
      std::vector<RuleEdge> rule_edges;
      stack.assign(1, order[k]);
      mark[order[k]] = static_cast<int32_t>(k);
      while (!stack.empty()) {
        const RawNode& raw = raw_[stack.back()];
        stack.pop_back();
        node.can_end |= raw.final;
        for (const auto& [set, to] : raw.bytes) {
          const int32_t target = keep(to);
          for (int b = 0; b < 256; ++b) {
            if (!set.test(b)) continue;
            int hi = b;
            while (hi < 255 && set.test(hi + 1)) ++hi;
            pda_.byte_edges_.push_back(ByteEdge{uint8_t(b), uint8_t(hi), target});
            b = hi;
          }
        }
        for (const RuleEdge& e : raw.rules) rule_edges.push_back(RuleEdge{e.rule, keep(e.target)});
        for (int32_t next : raw.eps) {
          if (mark[next] != static_cast<int32_t>(k)) {
            mark[next] = static_cast<int32_t>(k);
            stack.push_back(next);
          }
        }
      }
      std::sort(rule_edges.begin(), rule_edges.end(), [](const RuleEdge& a, const RuleEdge& b) {
        return std::pair(a.rule, a.target) < std::pair(b.rule, b.target);
      });
      for (size_t i = 0; i < rule_edges.size(); ++i) {
        if (i > 0 && rule_edges[i].rule == rule_edges[i - 1].rule &&
            rule_edges[i].target == rule_edges[i - 1].target) {
          continue;
        }
        pda_.rule_edges_.push_back(rule_edges[i]);
      }
      node.byte_end = static_cast<int32_t>(pda_.byte_edges_.size());
      node.rule_end = static_cast<int32_t>(pda_.rule_edges_.size());
      pda_.nodes_.push_back(node);
      if (static_cast<int64_t>(pda_.byte_edges_.size() + pda_.rule_edges_.size()) >
          limits_.max_edges) {
        return TooComplexError(absl::StrCat("more than ", limits_.max_edges, " automaton edges"));
      }
    }
    raw_.clear();
    raw_.shrink_to_fit();
    return absl::OkStatus();
  }

  const Grammar& g_;
  PdaLimits limits_;
  std::vector<RawNode> raw_;
  std::vector<bool> inline_;  // per rule: copied into callers
  Pda pda_;
};

absl::StatusOr<Pda> Pda::Build(const Grammar& grammar, const PdaLimits& limits) {
  return PdaBuilder(grammar, limits).Build();
}

int64_t Pda::MemoryBytes() const {
  return static_cast<int64_t>(nodes_.size() * sizeof(PdaNode) +
                              byte_edges_.size() * sizeof(ByteEdge) +
                              rule_edges_.size() * sizeof(RuleEdge) + rule_start_.size() * 4);
}

}  // namespace weir::grammar
