// grammar/rule_inliner.h
//
// Chooses the rules the PDA builder copies into their callers instead of
// calling. Token caches are per node and only decide tokens that stay inside
// the node's rule, so tiny rules (a JSON string character, a number) would
// leave almost every token undecided; inlining them makes rules big enough
// for the caches to work, at the cost of a few duplicated nodes.
//
// Thread safety: pure function.

#ifndef WEIR_GRAMMAR_RULE_INLINER_H_
#define WEIR_GRAMMAR_RULE_INLINER_H_

#include <cstdint>
#include <vector>

#include "grammar/grammar.h"

namespace weir::grammar {

// Returns, per rule, whether to inline it: the rule is not recursive (cannot
// reach itself through references) and its estimated expansion, counting
// inlined callees and repetitions, is at most `max_nodes`. The root is never
// inlined. REQUIRES: grammar.Validate() is OK.
std::vector<bool> InlinableRules(const Grammar& grammar, int64_t max_nodes);

}  // namespace weir::grammar

#endif  // WEIR_GRAMMAR_RULE_INLINER_H_
