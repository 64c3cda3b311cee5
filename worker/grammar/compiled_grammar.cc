// worker/grammar/compiled_grammar.cc

#include "worker/grammar/compiled_grammar.h"

#include <utility>

namespace weir::grammar {

CompiledGrammar::CompiledGrammar(Pda pda, std::shared_ptr<const Vocabulary> vocab)
    : pda_(std::move(pda)), vocab_(std::move(vocab)), caches_(pda_.num_nodes()) {
  for (auto& c : caches_) c.store(nullptr, std::memory_order_relaxed);
}

CompiledGrammar::~CompiledGrammar() {
  for (auto& c : caches_) delete c.load(std::memory_order_relaxed);
}

const NodeTokenCache& CompiledGrammar::TokenCache(int32_t node) const {
  const NodeTokenCache* cache = caches_[node].load(std::memory_order_acquire);
  if (cache != nullptr) return *cache;
  // Built outside the lock so matchers needing other nodes are not blocked.
  auto built = std::make_unique<NodeTokenCache>(BuildNodeTokenCache(pda_, *vocab_, node));
  absl::MutexLock lock(&mu_);
  cache = caches_[node].load(std::memory_order_acquire);
  if (cache != nullptr) return *cache;
  cache_bytes_.fetch_add(built->MemoryBytes(), std::memory_order_relaxed);
  caches_[node].store(built.get(), std::memory_order_release);
  return *built.release();
}

int64_t CompiledGrammar::MemoryBytes() const {
  return static_cast<int64_t>(sizeof(*this)) + pda_.MemoryBytes() +
         static_cast<int64_t>(caches_.size() * sizeof(void*)) +
         cache_bytes_.load(std::memory_order_relaxed);
}

}  // namespace weir::grammar
