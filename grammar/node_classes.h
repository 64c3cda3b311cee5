// grammar/node_classes.h
//
// Groups PDA nodes whose token caches are provably identical, so each group
// builds one cache. A token cache depends only on how the automaton behaves
// from the node for inputs no longer than the longest token; nodes that are
// k-step bisimilar (same pops, same calls and return points, byte edges into
// equivalent nodes) for k = the longest token's length share one. This
// collapses, e.g., the positions of a string with maxLength 1000.
//
// Thread safety: pure function.

#ifndef WEIR_GRAMMAR_NODE_CLASSES_H_
#define WEIR_GRAMMAR_NODE_CLASSES_H_

#include <cstdint>
#include <vector>

#include "grammar/pda.h"

namespace weir::grammar {

// Returns rep[n]: the smallest node equivalent to n for inputs of at most
// `max_token_bytes` bytes. Falls back to rep[n] == n when the refinement
// would take more than `max_work` edge visits.
std::vector<int32_t> TokenCacheRepresentatives(const Pda& pda, int32_t max_token_bytes,
                                               int64_t max_work = 50'000'000);

}  // namespace weir::grammar

#endif  // WEIR_GRAMMAR_NODE_CLASSES_H_
