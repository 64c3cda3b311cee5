// grammar/compiler.h
//
// GrammarCompiler turns constraints into CompiledGrammars for one vocabulary,
// off the caller's thread, with a compile cache bounded in bytes.
//
// Thread safety: thread-safe. CompileAsync may be called from any thread;
// compilation runs on the compiler's own worker threads.

#ifndef WEIR_GRAMMAR_COMPILER_H_
#define WEIR_GRAMMAR_COMPILER_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <list>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grammar/compiled_grammar.h"
#include "grammar/constraint.h"
#include "grammar/pda.h"

namespace weir::grammar {

using CompileResult = absl::StatusOr<std::shared_ptr<const CompiledGrammar>>;

// A handle on a compile in progress (like std::shared_future). Copyable;
// all copies observe the same result.
class CompileFuture {
 public:
  // True once the result is available; never blocks.
  bool Ready() const;
  // Blocks until the result is available, then returns it.
  CompileResult Wait() const;
  // Waits at most `timeout`; returns true if the result is available.
  bool WaitFor(absl::Duration timeout) const;

 private:
  friend class GrammarCompiler;
  struct State {
    mutable absl::Mutex mu;
    bool done ABSL_GUARDED_BY(mu) = false;
    CompileResult result ABSL_GUARDED_BY(mu) = absl::UnknownError("not compiled");
  };
  // Shared by the compile task, the cache entry and every handle.
  std::shared_ptr<State> state_;
};

struct CompilerOptions {
  int64_t cache_bytes = 512ll << 20;  // bound on cached grammars, incl. token caches
  int num_threads = 2;
  // Compiles waiting for a thread; beyond this CompileAsync answers
  // RESOURCE_EXHAUSTED at once (a flood of distinct constraints cannot grow
  // the queue without bound).
  int max_pending = 1024;
  GrammarLimits grammar_limits;
  PdaLimits pda_limits;
  // A compile running longer is abandoned with GRAMMAR_TOO_COMPLEX (checked
  // between phases; the size limits bound each phase).
  absl::Duration compile_timeout = absl::Seconds(10);
  // After a compile is ready, its token caches are built on the compile
  // thread for up to this long, so most decode steps find them ready (zero:
  // all lazy). The future does not wait for this.
  absl::Duration precompute_budget = absl::Milliseconds(500);
};

class GrammarCompiler {
 public:
  // `vocab` is shared with every grammar compiled here.
  GrammarCompiler(std::shared_ptr<const Vocabulary> vocab, CompilerOptions options = {});
  // Finishes queued compiles with CANCELLED and joins the worker threads.
  ~GrammarCompiler();

  // Starts compiling `constraint` (or returns the cached or in-flight
  // compile of an identical one). Never blocks on compilation. The result
  // is the grammar or the front-end's INVALID_ARGUMENT (incl.
  // GRAMMAR_TOO_COMPLEX); errors are cached too, so a hostile constraint
  // is not recompiled. RESOURCE_EXHAUSTED (not cached; retry later) when
  // max_pending compiles are already queued.
  CompileFuture CompileAsync(const Constraint& constraint);

  // CompileAsync(constraint).Wait().
  CompileResult Compile(const Constraint& constraint) { return CompileAsync(constraint).Wait(); }

  // Current cache footprint and entry count.
  int64_t cache_bytes() const;
  int cache_entries() const;

 private:
  struct Entry {
    std::string key;
    CompileFuture future;
  };
  CompileResult CompileNow(const Constraint& constraint) const;
  void Finish(const std::shared_ptr<CompileFuture::State>& state, CompileResult result);
  void EvictLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int64_t EntryBytesLocked(const Entry& e) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void WorkerLoop();

  const std::shared_ptr<const Vocabulary> vocab_;
  const CompilerOptions options_;

  mutable absl::Mutex mu_;
  // Guarded by mu_:
  std::list<Entry> lru_ ABSL_GUARDED_BY(mu_);  // most recent first
  absl::flat_hash_map<std::string, std::list<Entry>::iterator> index_ ABSL_GUARDED_BY(mu_);
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;

  std::vector<std::thread> threads_;
};

}  // namespace weir::grammar

#endif  // WEIR_GRAMMAR_COMPILER_H_
