// grammar/token_cache.h
//
// Per-node token cache: for one PDA node, the tokens decided without knowing
// the stack below it. Walking the vocabulary trie from the node with an
// unknown caller sorts every token into
//   accepted  - consumed entirely within the node's rule (and rules it calls),
//   rejected  - dies before the rule could return to any caller,
//   uncertain - needs the caller after the rule returns mid-token.
// Only uncertain tokens are re-checked against the real stack per step.
// The cache is used for "ready" frames (those that consume the next byte
// after the state's calls and returns are expanded), so a return before the
// first byte is not a reason for uncertainty: the caller's frames are ready
// frames of their own.
//
// Thread safety: immutable values; BuildNodeTokenCache is a pure function.

#ifndef WEIR_GRAMMAR_TOKEN_CACHE_H_
#define WEIR_GRAMMAR_TOKEN_CACHE_H_

#include <cstdint>
#include <vector>

#include "grammar/pda.h"
#include "grammar/vocabulary.h"

namespace weir::grammar {

struct NodeTokenCache {
  // Accepted tokens, either as a bitmask [mask_words] (dense) or as ids
  // (sparse, when few); exactly one of the two is non-empty unless none.
  std::vector<uint32_t> accepted_mask;
  std::vector<int32_t> accepted_ids;
  // Uncertain tokens as indices into Vocabulary::sorted_ids(), ascending, so
  // consecutive checks share prefixes.
  std::vector<int32_t> uncertain;

  // ORs the accepted tokens into `mask` [vocab.mask_words()].
  void OrAccepted(uint32_t* mask) const;
  int64_t MemoryBytes() const;
};

// Walks `vocab`'s trie from `node` over `pda`. REQUIRES: 0 <= node < pda.num_nodes().
NodeTokenCache BuildNodeTokenCache(const Pda& pda, const Vocabulary& vocab, int32_t node);

}  // namespace weir::grammar

#endif  // WEIR_GRAMMAR_TOKEN_CACHE_H_
