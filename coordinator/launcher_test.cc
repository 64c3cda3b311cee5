#include "coordinator/launcher.h"

#include <signal.h>

#include <vector>

#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"

namespace weir::coordinator {
namespace {

struct ExitLog {
  absl::Mutex mu;
  std::vector<ChildExit> exits;
  void Add(const ChildExit& e) {
    absl::MutexLock lock(&mu);
    exits.push_back(e);
  }
  size_t size() {
    absl::MutexLock lock(&mu);
    return exits.size();
  }
};

TEST(LauncherTest, ReportsExitCodeAndSignal) {
  ExitLog log;
  Launcher launcher([&](const ChildExit& e) { log.Add(e); });
  auto ok = launcher.Spawn("true", {"/bin/sh", "-c", "exit 3"});
  ASSERT_TRUE(ok.ok()) << ok.status();
  auto sleeper = launcher.Spawn("sleeper", {"/bin/sleep", "30"});
  ASSERT_TRUE(sleeper.ok());
  kill(*sleeper, SIGKILL);
  ASSERT_TRUE(launcher.WaitAllExited(absl::Seconds(10)));
  ASSERT_EQ(log.size(), 2u);
  for (const ChildExit& e : log.exits) {
    if (e.pid == *ok) {
      EXPECT_EQ(e.exit_code, 3);
      EXPECT_EQ(e.signal, 0);
      EXPECT_EQ(e.Describe(), "exited with code 3");
    } else {
      EXPECT_EQ(e.pid, *sleeper);
      EXPECT_EQ(e.signal, SIGKILL);
      EXPECT_NE(e.Describe().find("signal 9"), std::string::npos);
    }
  }
}

TEST(LauncherTest, MissingBinaryExitsWith127) {
  ExitLog log;
  Launcher launcher([&](const ChildExit& e) { log.Add(e); });
  ASSERT_TRUE(launcher.Spawn("ghost", {"/nonexistent/binary"}).ok());
  ASSERT_TRUE(launcher.WaitAllExited(absl::Seconds(10)));
  ASSERT_EQ(log.size(), 1u);
  EXPECT_EQ(log.exits[0].exit_code, 127);
}

TEST(LauncherTest, StopAllEscalatesToSigkill) {
  ExitLog log;
  Launcher launcher([&](const ChildExit& e) { log.Add(e); });
  // This child ignores SIGTERM, so only the SIGKILL after the grace ends it.
  ASSERT_TRUE(launcher.Spawn("stubborn", {"/bin/sh", "-c", "trap '' TERM; sleep 30"}).ok());
  ASSERT_TRUE(launcher.Spawn("polite", {"/bin/sleep", "30"}).ok());
  absl::SleepFor(absl::Milliseconds(200));  // Let the shell install its trap.
  launcher.StopAll(absl::Milliseconds(500));
  EXPECT_TRUE(launcher.running().empty());
  ASSERT_EQ(log.size(), 2u);
  int killed = 0, termed = 0;
  for (const ChildExit& e : log.exits) {
    killed += e.signal == SIGKILL;
    termed += e.signal == SIGTERM;
  }
  EXPECT_EQ(killed, 1);
  EXPECT_EQ(termed, 1);
}

TEST(LauncherTest, EmptyArgvIsInvalid) {
  Launcher launcher(nullptr);
  EXPECT_EQ(launcher.Spawn("nothing", {}).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace weir::coordinator
