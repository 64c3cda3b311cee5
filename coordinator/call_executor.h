// coordinator/call_executor.h
//
// CallExecutor is the fixed set of threads that does the public API's
// per-call work off gRPC's own threads: admitting a Generate call
// (tokenizing, compiling a constraint, submitting), turning step-loop events
// into messages, and timers (GenerateBatch's progress and item deadlines).
// However many streams are open, the coordinator spends only these threads
// on them; a stream that waits for tokens costs no thread at all.
//
// Thread safety: thread-safe. Tasks run in no particular order across
// threads; a caller that needs order serialises its own tasks (the reactors
// take their own mutex).

#ifndef WEIR_COORDINATOR_CALL_EXECUTOR_H_
#define WEIR_COORDINATOR_CALL_EXECUTOR_H_

#include <functional>
#include <map>
#include <deque>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace weir::coordinator {

class CallExecutor {
 public:
  // Starts `threads` threads (at least 1).
  explicit CallExecutor(int threads);
  // Runs the tasks already posted, drops pending timers and joins the threads.
  ~CallExecutor();

  CallExecutor(const CallExecutor&) = delete;
  CallExecutor& operator=(const CallExecutor&) = delete;

  // Runs `task` on one of the threads soon. A task must not block for long
  // (it holds one of few threads); it may post more tasks.
  void Post(std::function<void()> task);
  // Runs `task` at `when` or soon after (at once if `when` has passed).
  // Timers pending at destruction never run.
  void PostAt(absl::Time when, std::function<void()> task);

  int num_threads() const { return static_cast<int>(threads_.size()); }

 private:
  void Loop();

  absl::Mutex mu_;
  std::deque<std::function<void()>> ready_ ABSL_GUARDED_BY(mu_);
  std::multimap<absl::Time, std::function<void()>> timers_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace weir::coordinator

#endif  // WEIR_COORDINATOR_CALL_EXECUTOR_H_
