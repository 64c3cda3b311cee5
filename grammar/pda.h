// grammar/pda.h
//
// The pushdown automaton a Grammar compiles to. Each rule becomes an
// epsilon-free NFA over bytes whose edges either consume one byte in a range
// or call another rule (push a return node). A parse stack is a path of nodes;
// a node with can_end set may pop to its caller.
//
// Thread safety: immutable after Build; const access from any thread.

#ifndef WEIR_GRAMMAR_PDA_H_
#define WEIR_GRAMMAR_PDA_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "grammar/grammar.h"

namespace weir::grammar {

struct PdaLimits {
  int64_t max_nodes = 200'000;  // NFA nodes before epsilon removal
  int64_t max_edges = 2'000'000;
  // Non-recursive rules whose expansion is at most this many nodes are
  // copied into their callers (see rule_inliner.h); 0 disables inlining.
  int64_t max_inline_nodes = 64;
};

struct ByteEdge {
  uint8_t lo;
  uint8_t hi;
  int32_t target;
};

struct RuleEdge {
  RuleId rule;
  int32_t target;  // where the caller resumes after `rule` ends
};

struct PdaNode {
  int32_t byte_begin = 0, byte_end = 0;  // range in Pda::byte_edges()
  int32_t rule_begin = 0, rule_end = 0;  // range in Pda::rule_edges()
  bool can_end = false;                  // the rule may end here (pop)
  // can_end and no outgoing edges: a call returning here may be replaced by a
  // tail call (keeps right-recursive rules at constant stack depth).
  bool pure_end = false;
};

class Pda {
 public:
  // Compiles `grammar`. Errors (INVALID_ARGUMENT): left recursion (named rule),
  // a root that matches no string, GRAMMAR_TOO_COMPLEX past `limits`.
  // Rules that match no string are dropped with the edges that use them.
  static absl::StatusOr<Pda> Build(const Grammar& grammar, const PdaLimits& limits = {});

  int32_t num_nodes() const { return static_cast<int32_t>(nodes_.size()); }
  const PdaNode& node(int32_t id) const { return nodes_[id]; }
  int32_t rule_start(RuleId rule) const { return rule_start_[rule]; }
  int32_t root_start() const { return rule_start_[root_]; }
  const ByteEdge* byte_edges(const PdaNode& n) const { return byte_edges_.data() + n.byte_begin; }
  const RuleEdge* rule_edges(const PdaNode& n) const { return rule_edges_.data() + n.rule_begin; }
  int64_t MemoryBytes() const;

 private:
  friend class PdaBuilder;
  friend absl::Status CheckLeftRecursion(const Grammar& g, const Pda& pda);
  friend absl::Status TrimDeadEnds(const Grammar& g, const PdaLimits& limits, Pda& pda);
  std::vector<PdaNode> nodes_;
  std::vector<ByteEdge> byte_edges_;
  std::vector<RuleEdge> rule_edges_;
  std::vector<int32_t> rule_start_;  // -1 for dropped rules
  RuleId root_ = -1;
};

}  // namespace weir::grammar

#endif  // WEIR_GRAMMAR_PDA_H_
