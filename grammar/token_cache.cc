// grammar/token_cache.cc

#include "grammar/token_cache.h"

#include "grammar/stack_dfa.h"

namespace weir::grammar {

void NodeTokenCache::OrAccepted(uint32_t* mask) const {
  if (!accepted_mask.empty()) {
    for (size_t w = 0; w < accepted_mask.size(); ++w) mask[w] |= accepted_mask[w];
  }
  for (int32_t id : accepted_ids) mask[id >> 5] |= 1u << (id & 31);
}

int64_t NodeTokenCache::MemoryBytes() const {
  return static_cast<int64_t>(sizeof(*this) + accepted_mask.capacity() * 4 +
                              accepted_ids.capacity() * 4 + uncertain.capacity() * 4);
}

NodeTokenCache BuildNodeTokenCache(const Pda& pda, const Vocabulary& vocab, int32_t node) {
  NodeTokenCache cache;
  StackDfa dfa(pda);
  const std::vector<TrieNode>& trie = vocab.trie();
  const std::vector<int32_t>& sorted = vocab.sorted_ids();
  std::vector<StackDfa::StateId> state(1, dfa.Intern(FrameSet{Frame{node, kBoundaryStack}}));
  // context[d]: the rule could return to its caller after fewer than d bytes.
  std::vector<char> context(1, 0);
  std::vector<int32_t> accepted;
  for (size_t i = 0; i < trie.size();) {
    const TrieNode& t = trie[i];
    const StackDfa::StateId prev = state[t.depth - 1];
    // A return before the first byte is not counted: the matcher expands it
    // into the caller's own frames, which have their own caches.
    const bool ctx = context[t.depth - 1] || (t.depth > 1 && dfa.HitsBoundary(prev));
    const StackDfa::StateId s = dfa.Next(prev, t.byte);
    if (s == StackDfa::kDead) {
      if (ctx) {
        for (int32_t k = t.token_begin; k < t.token_end; ++k) cache.uncertain.push_back(k);
      }
      i = t.subtree_end;
      continue;
    }
    // If the automaton loops on every byte below, the whole subtree stays in
    // state `s`: accept it without walking (strings, digit runs).
    if (t.subtree_end > static_cast<int32_t>(i) + 1 && dfa.HasSelfLoops(s) &&
        (vocab.subtree_bytes()[i] & ~dfa.SelfLoops(s)).none()) {
      for (int32_t k = t.token_begin; k < t.token_end; ++k) accepted.push_back(sorted[k]);
      i = t.subtree_end;
      continue;
    }
    for (int32_t k = t.token_begin; k < t.own_end; ++k) accepted.push_back(sorted[k]);
    if (state.size() <= t.depth) {
      state.resize(t.depth + 1);
      context.resize(t.depth + 1);
    }
    state[t.depth] = s;
    context[t.depth] = ctx;
    ++i;
  }
  // Ids and mask words both cost 4 bytes: keep the smaller form.
  if (static_cast<int64_t>(accepted.size()) < vocab.mask_words()) {
    cache.accepted_ids = std::move(accepted);
  } else {
    cache.accepted_mask.assign(vocab.mask_words(), 0);
    for (int32_t id : accepted) cache.accepted_mask[id >> 5] |= 1u << (id & 31);
  }
  cache.uncertain.shrink_to_fit();
  return cache;
}

}  // namespace weir::grammar
