// grammar/pda_analysis.cc
//
// Fixpoints over a built PDA: nullable rules (for the left-recursion check)
// and productive nodes (to drop dead ends, so any live stack can finish).

#include "grammar/pda_analysis.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace weir::grammar {

absl::Status CheckLeftRecursion(const Grammar& g, const Pda& pda) {
  const int32_t n = pda.num_nodes(), num_rules = g.num_rules();
  // fin[v]: the rule containing v can end from v without consuming a byte.
  std::vector<char> fin(n), nullable(num_rules);
  for (bool changed = true; changed;) {
    changed = false;
    for (int32_t v = 0; v < n; ++v) {
      if (fin[v]) continue;
      const PdaNode& node = pda.nodes_[v];
      bool f = node.can_end;
      for (int32_t i = node.rule_begin; i < node.rule_end && !f; ++i) {
        const RuleEdge& e = pda.rule_edges_[i];
        f = nullable[e.rule] && fin[e.target];
      }
      if (f) fin[v] = changed = true;
    }
    for (RuleId r = 0; r < num_rules; ++r) {
      if (!nullable[r] && fin[pda.rule_start_[r]]) nullable[r] = changed = true;
    }
  }
  // Rules each rule may call before consuming a byte.
  std::vector<std::vector<RuleId>> calls(num_rules);
  std::vector<int32_t> seen(n, -1), stack;
  for (RuleId r = 0; r < num_rules; ++r) {
    stack.assign(1, pda.rule_start_[r]);
    seen[stack[0]] = r;
    while (!stack.empty()) {
      const PdaNode& node = pda.nodes_[stack.back()];
      stack.pop_back();
      for (int32_t i = node.rule_begin; i < node.rule_end; ++i) {
        const RuleEdge& e = pda.rule_edges_[i];
        calls[r].push_back(e.rule);
        if (nullable[e.rule] && seen[e.target] != r) {
          seen[e.target] = r;
          stack.push_back(e.target);
        }
      }
    }
  }
  std::vector<char> color(num_rules);  // 0 new, 1 on path, 2 done
  std::vector<std::pair<RuleId, size_t>> path;
  for (RuleId r0 = 0; r0 < num_rules; ++r0) {
    if (color[r0]) continue;
    path.assign(1, {r0, 0});
    color[r0] = 1;
    while (!path.empty()) {
      auto& [r, i] = path.back();
      if (i == calls[r].size()) {
        color[r] = 2;
        path.pop_back();
        continue;
      }
      const RuleId next = calls[r][i++];
      if (color[next] == 1) {
        return absl::InvalidArgumentError(
            absl::StrCat("left recursion through rule '", g.rule(next).name, "'"));
      }
      if (color[next] == 0) {
        color[next] = 1;
        path.push_back({next, 0});
      }
    }
  }
  return absl::OkStatus();
}

absl::Status TrimDeadEnds(const Grammar& g, const PdaLimits& limits, Pda& pda) {
  const int32_t n = pda.num_nodes(), num_rules = g.num_rules();
  std::vector<char> prod(n), prod_rule(num_rules);
  for (bool changed = true; changed;) {
    changed = false;
    for (int32_t v = 0; v < n; ++v) {
      if (prod[v]) continue;
      const PdaNode& node = pda.nodes_[v];
      bool p = node.can_end;
      for (int32_t i = node.byte_begin; i < node.byte_end && !p; ++i) {
        p = prod[pda.byte_edges_[i].target];
      }
      for (int32_t i = node.rule_begin; i < node.rule_end && !p; ++i) {
        p = prod_rule[pda.rule_edges_[i].rule] && prod[pda.rule_edges_[i].target];
      }
      if (p) prod[v] = changed = true;
    }
    for (RuleId r = 0; r < num_rules; ++r) {
      if (!prod_rule[r] && prod[pda.rule_start_[r]]) prod_rule[r] = changed = true;
    }
  }
  if (!prod_rule[pda.root_]) {
    return absl::InvalidArgumentError("grammar matches no string");
  }
  std::vector<ByteEdge> bytes;
  std::vector<RuleEdge> rules;
  for (PdaNode& node : pda.nodes_) {
    const int32_t b0 = static_cast<int32_t>(bytes.size()), r0 = static_cast<int32_t>(rules.size());
    for (int32_t i = node.byte_begin; i < node.byte_end; ++i) {
      if (prod[pda.byte_edges_[i].target]) bytes.push_back(pda.byte_edges_[i]);
    }
    for (int32_t i = node.rule_begin; i < node.rule_end; ++i) {
      const RuleEdge& e = pda.rule_edges_[i];
      if (prod_rule[e.rule] && prod[e.target]) rules.push_back(e);
    }
    node.byte_begin = b0;
    node.byte_end = static_cast<int32_t>(bytes.size());
    node.rule_begin = r0;
    node.rule_end = static_cast<int32_t>(rules.size());
    node.pure_end = node.can_end && node.byte_begin == node.byte_end && r0 == node.rule_end;
    if (static_cast<int64_t>(bytes.size() + rules.size()) > limits.max_edges) {
      return TooComplexError(absl::StrCat("more than ", limits.max_edges, " automaton edges"));
    }
  }
  pda.byte_edges_ = std::move(bytes);
  pda.rule_edges_ = std::move(rules);
  for (RuleId r = 0; r < num_rules; ++r) {
    if (!prod_rule[r]) pda.rule_start_[r] = -1;
  }
  return absl::OkStatus();
}

}  // namespace weir::grammar
