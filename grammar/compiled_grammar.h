// grammar/compiled_grammar.h
//
// A grammar compiled against one vocabulary: the PDA plus the per-node token
// caches (built lazily, once per class of equivalent nodes, on first use by
// any matcher; see node_classes.h).
//
// Thread safety: thread-safe. Matchers on many threads share one instance;
// TokenCache may build a cache concurrently, and the first to finish wins.

#ifndef WEIR_GRAMMAR_COMPILED_GRAMMAR_H_
#define WEIR_GRAMMAR_COMPILED_GRAMMAR_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grammar/pda.h"
#include "grammar/token_cache.h"
#include "grammar/vocabulary.h"

namespace weir::grammar {

class CompiledGrammar {
 public:
  // `vocab` is shared: one vocabulary serves every grammar of a model.
  CompiledGrammar(Pda pda, std::shared_ptr<const Vocabulary> vocab);
  ~CompiledGrammar();

  const Pda& pda() const { return pda_; }
  const Vocabulary& vocab() const { return *vocab_; }

  // Returns the token cache of `node`, building it on first use (a trie walk;
  // up to a few milliseconds for permissive nodes). The reference stays valid
  // for the lifetime of this object. REQUIRES: 0 <= node < pda().num_nodes().
  const NodeTokenCache& TokenCache(int32_t node) const;

  // Builds the token caches of every node that can consume a byte, in node
  // order, until done or `budget` has passed; the rest stay lazy. Returns
  // the number of caches built by this call.
  int32_t PrecomputeTokenCaches(absl::Duration budget) const;

  // Number of token caches built so far.
  int32_t num_token_caches() const { return num_caches_.load(std::memory_order_relaxed); }

  // Bytes held: PDA plus the token caches built so far (grows with use).
  int64_t MemoryBytes() const;

 private:
  Pda pda_;
  std::shared_ptr<const Vocabulary> vocab_;
  std::vector<int32_t> representative_;  // node -> node whose cache it shares
  mutable std::vector<std::atomic<const NodeTokenCache*>> caches_;  // by representative
  mutable std::atomic<int64_t> cache_bytes_{0};
  mutable std::atomic<int32_t> num_caches_{0};
  mutable absl::Mutex mu_;  // serializes publication into caches_
};

}  // namespace weir::grammar

#endif  // WEIR_GRAMMAR_COMPILED_GRAMMAR_H_
