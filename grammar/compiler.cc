// grammar/compiler.cc

#include "grammar/compiler.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace weir::grammar {

bool CompileFuture::Ready() const {
  absl::MutexLock lock(&state_->mu);
  return state_->done;
}

CompileResult CompileFuture::Wait() const {
  absl::MutexLock lock(&state_->mu);
  state_->mu.Await(absl::Condition(&state_->done));
  return state_->result;
}

bool CompileFuture::WaitFor(absl::Duration timeout) const {
  absl::MutexLock lock(&state_->mu);
  return state_->mu.AwaitWithTimeout(absl::Condition(&state_->done), timeout);
}

GrammarCompiler::GrammarCompiler(std::shared_ptr<const Vocabulary> vocab, CompilerOptions options)
    : vocab_(std::move(vocab)), options_(options) {
  for (int i = 0; i < std::max(1, options_.num_threads); ++i) {
    threads_.emplace_back([this] { WorkerLoop(); });
  }
}

GrammarCompiler::~GrammarCompiler() {
  std::deque<std::function<void()>> dropped;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    dropped.swap(queue_);
  }
  for (std::thread& t : threads_) t.join();
  // Queued tasks hold their future's state; completing them as cancelled
  // releases any waiter.
  absl::MutexLock lock(&mu_);
  for (Entry& e : lru_) {
    absl::MutexLock state_lock(&e.future.state_->mu);
    if (!e.future.state_->done) {
      e.future.state_->result = absl::CancelledError("grammar compiler shut down");
      e.future.state_->done = true;
    }
  }
}

void GrammarCompiler::WorkerLoop() {
  while (true) {
    std::function<void()> task;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](GrammarCompiler* c)
               ABSL_EXCLUSIVE_LOCKS_REQUIRED(c->mu_) { return c->stopping_ || !c->queue_.empty(); },
          this));
      if (stopping_) return;
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    task();
  }
}

CompileResult GrammarCompiler::CompileNow(const Constraint& constraint) const {
  const absl::Time deadline = absl::Now() + options_.compile_timeout;
  auto too_slow = [&] {
    return TooComplexError(
        absl::StrCat("compile exceeded ", absl::FormatDuration(options_.compile_timeout)));
  };
  auto grammar = ConstraintToGrammar(constraint, options_.grammar_limits);
  if (!grammar.ok()) return grammar.status();
  if (absl::Now() >= deadline) return too_slow();
  auto pda = Pda::Build(*grammar, options_.pda_limits);
  if (!pda.ok()) return pda.status();
  if (absl::Now() >= deadline) return too_slow();
  return std::make_shared<const CompiledGrammar>(*std::move(pda), vocab_);
}

CompileFuture GrammarCompiler::CompileAsync(const Constraint& constraint) {
  std::string key = constraint.CacheKey();
  absl::MutexLock lock(&mu_);
  if (auto it = index_.find(key); it != index_.end()) {
    lru_.splice(lru_.begin(), lru_, it->second);  // mark most recent
    return it->second->future;
  }
  CompileFuture future;
  future.state_ = std::make_shared<CompileFuture::State>();
  if (static_cast<int>(queue_.size()) >= options_.max_pending) {
    absl::MutexLock state_lock(&future.state_->mu);
    future.state_->result = absl::ResourceExhaustedError(
        absl::StrCat(queue_.size(), " grammar compiles already pending"));
    future.state_->done = true;
    return future;
  }
  lru_.push_front(Entry{key, future});
  index_.emplace(std::move(key), lru_.begin());
  queue_.push_back([this, constraint, state = future.state_] {
    CompileResult result = CompileNow(constraint);
    std::shared_ptr<const CompiledGrammar> grammar = result.ok() ? *result : nullptr;
    Finish(state, std::move(result));
    // The request may start now; its first steps race these builds harmlessly
    // (a cache is published once, whoever finishes first).
    if (grammar != nullptr && grammar->PrecomputeTokenCaches(options_.precompute_budget) > 0) {
      absl::MutexLock lock(&mu_);
      EvictLocked();  // the entry grew
    }
  });
  EvictLocked();
  return future;
}

void GrammarCompiler::Finish(const std::shared_ptr<CompileFuture::State>& state,
                             CompileResult result) {
  {
    absl::MutexLock state_lock(&state->mu);
    state->result = std::move(result);
    state->done = true;
  }
  absl::MutexLock lock(&mu_);
  EvictLocked();
}

int64_t GrammarCompiler::EntryBytesLocked(const Entry& e) const {
  int64_t bytes = static_cast<int64_t>(2 * e.key.size() + sizeof(Entry) + 64);
  absl::MutexLock state_lock(&e.future.state_->mu);
  if (e.future.state_->done && e.future.state_->result.ok()) {
    bytes += (*e.future.state_->result)->MemoryBytes();
  }
  return bytes;
}

void GrammarCompiler::EvictLocked() {
  int64_t total = 0;
  for (const Entry& e : lru_) total += EntryBytesLocked(e);
  // Evict least recent first; an in-flight compile stays (its task holds it)
  // but finished grammars and errors go once over budget. Matchers holding an
  // evicted grammar keep it alive until they finish.
  for (auto it = lru_.end(); total > options_.cache_bytes && it != lru_.begin();) {
    --it;
    if (!it->future.Ready()) continue;
    total -= EntryBytesLocked(*it);
    index_.erase(it->key);
    it = lru_.erase(it);
  }
}

int64_t GrammarCompiler::cache_bytes() const {
  absl::MutexLock lock(&mu_);
  int64_t total = 0;
  for (const Entry& e : lru_) total += EntryBytesLocked(e);
  return total;
}

int GrammarCompiler::cache_entries() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(lru_.size());
}

}  // namespace weir::grammar
