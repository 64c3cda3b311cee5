#include "coordinator/call_executor.h"

#include <algorithm>

#include "absl/time/clock.h"

namespace weir::coordinator {

CallExecutor::CallExecutor(int threads) {
  for (int i = 0; i < std::max(threads, 1); ++i) threads_.emplace_back([this] { Loop(); });
}

CallExecutor::~CallExecutor() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (std::thread& t : threads_) t.join();
}

void CallExecutor::Post(std::function<void()> task) {
  absl::MutexLock lock(&mu_);
  ready_.push_back(std::move(task));
}

void CallExecutor::PostAt(absl::Time when, std::function<void()> task) {
  absl::MutexLock lock(&mu_);
  timers_.emplace(when, std::move(task));
}

void CallExecutor::Loop() {
  while (true) {
    std::function<void()> task;
    {
      absl::MutexLock lock(&mu_);
      while (true) {
        const absl::Time now = absl::Now();
        // Timers that are due join the ready tasks in time order.
        while (!timers_.empty() && timers_.begin()->first <= now) {
          ready_.push_back(std::move(timers_.begin()->second));
          timers_.erase(timers_.begin());
        }
        if (!ready_.empty()) break;
        if (stopping_) return;
        const absl::Time wake =
            timers_.empty() ? absl::InfiniteFuture() : timers_.begin()->first;
        // Also wakes for a timer posted meanwhile that is due before `wake`.
        auto woken = [this, wake]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
          return !ready_.empty() || stopping_ ||
                 (!timers_.empty() && timers_.begin()->first < wake);
        };
        mu_.AwaitWithDeadline(absl::Condition(&woken), wake);
      }
      task = std::move(ready_.front());
      ready_.pop_front();
    }
    task();
  }
}

}  // namespace weir::coordinator
