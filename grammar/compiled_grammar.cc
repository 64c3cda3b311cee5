// grammar/compiled_grammar.cc

#include "grammar/compiled_grammar.h"

#include <utility>

#include "grammar/node_classes.h"

namespace weir::grammar {

CompiledGrammar::CompiledGrammar(Pda pda, std::shared_ptr<const Vocabulary> vocab)
    : pda_(std::move(pda)),
      vocab_(std::move(vocab)),
      representative_(TokenCacheRepresentatives(pda_, vocab_->max_token_bytes())),
      caches_(pda_.num_nodes()) {
  for (auto& c : caches_) c.store(nullptr, std::memory_order_relaxed);
}

CompiledGrammar::~CompiledGrammar() {
  for (auto& c : caches_) delete c.load(std::memory_order_relaxed);
}

const NodeTokenCache& CompiledGrammar::TokenCache(int32_t node) const {
  node = representative_[node];
  const NodeTokenCache* cache = caches_[node].load(std::memory_order_acquire);
  if (cache != nullptr) return *cache;
  // Built outside the lock so matchers needing other nodes are not blocked.
  auto built = std::make_unique<NodeTokenCache>(BuildNodeTokenCache(pda_, *vocab_, node));
  absl::MutexLock lock(&mu_);
  cache = caches_[node].load(std::memory_order_acquire);
  if (cache != nullptr) return *cache;
  cache_bytes_.fetch_add(built->MemoryBytes(), std::memory_order_relaxed);
  num_caches_.fetch_add(1, std::memory_order_relaxed);
  caches_[node].store(built.get(), std::memory_order_release);
  return *built.release();
}

int32_t CompiledGrammar::PrecomputeTokenCaches(absl::Duration budget) const {
  const absl::Time deadline = absl::Now() + budget;
  const int32_t before = num_token_caches();
  for (int32_t n = 0; n < pda_.num_nodes() && absl::Now() < deadline; ++n) {
    const PdaNode& node = pda_.node(n);
    if (node.byte_begin != node.byte_end) TokenCache(n);
  }
  return num_token_caches() - before;
}

int64_t CompiledGrammar::MemoryBytes() const {
  return static_cast<int64_t>(sizeof(*this)) + pda_.MemoryBytes() +
         static_cast<int64_t>(caches_.size() * (sizeof(void*) + sizeof(int32_t))) +
         cache_bytes_.load(std::memory_order_relaxed);
}

}  // namespace weir::grammar
