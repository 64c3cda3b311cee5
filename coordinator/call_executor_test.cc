#include "coordinator/call_executor.h"

#include <atomic>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace weir::coordinator {
namespace {

TEST(CallExecutorTest, RunsEveryPostedTask) {
  std::atomic<int> ran{0};
  {
    CallExecutor executor(3);
    EXPECT_EQ(executor.num_threads(), 3);
    for (int i = 0; i < 1000; ++i) executor.Post([&ran] { ran.fetch_add(1); });
  }  // The destructor runs what was posted.
  EXPECT_EQ(ran.load(), 1000);
}

TEST(CallExecutorTest, TimersRunInOrderAndNotBeforeTheirTime) {
  CallExecutor executor(1);
  absl::Mutex mu;
  std::vector<int> order;
  absl::Notification done;
  const absl::Time start = absl::Now();
  absl::Time first_ran;
  executor.PostAt(start + absl::Milliseconds(200), [&] {
    absl::MutexLock lock(&mu);
    order.push_back(2);
    done.Notify();
  });
  // Posted later, due earlier: wakes the sleeping thread.
  executor.PostAt(start + absl::Milliseconds(50), [&] {
    absl::MutexLock lock(&mu);
    first_ran = absl::Now();
    order.push_back(1);
  });
  executor.Post([&] {
    absl::MutexLock lock(&mu);
    order.push_back(0);
  });
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  absl::MutexLock lock(&mu);
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2}));
  EXPECT_GE(first_ran - start, absl::Milliseconds(50));
}

TEST(CallExecutorTest, PendingTimersAreDroppedAtDestruction) {
  std::atomic<bool> ran{false};
  {
    CallExecutor executor(2);
    executor.PostAt(absl::Now() + absl::Hours(1), [&ran] { ran = true; });
  }
  EXPECT_FALSE(ran.load());
}

TEST(CallExecutorTest, ZeroThreadsMeansOne) {
  CallExecutor executor(0);
  EXPECT_EQ(executor.num_threads(), 1);
  absl::Notification done;
  executor.Post([&done] { done.Notify(); });
  EXPECT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(30)));
}

}  // namespace
}  // namespace weir::coordinator
