// parallel/fork_ranks.cc

#include "parallel/fork_ranks.h"

#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace weir::parallel {
namespace {

int Outcome(int wstatus) {
  if (WIFEXITED(wstatus)) return WEXITSTATUS(wstatus);
  if (WIFSIGNALED(wstatus)) return 128 + WTERMSIG(wstatus);
  return -1;
}

}  // namespace

absl::StatusOr<std::vector<int>> ForkRanks(int world_size, const std::function<int(int)>& body,
                                           absl::Duration timeout) {
  std::vector<pid_t> pids;
  std::fflush(nullptr);  // children must not re-flush the parent's buffers
  for (int r = 0; r < world_size; ++r) {
    const pid_t pid = fork();
    if (pid == 0) {
      const int code = body(r);
      std::fflush(nullptr);
      _exit(code);
    }
    if (pid < 0) {
      const int err = errno;
      for (pid_t p : pids) {
        kill(p, SIGKILL);
        waitpid(p, nullptr, 0);
      }
      return absl::InternalError(absl::StrCat("fork: ", std::strerror(err)));
    }
    pids.push_back(pid);
  }
  std::vector<int> outcome(world_size, -1);
  int running = world_size;
  const absl::Time deadline = absl::Now() + timeout;
  bool killed = false;
  while (running > 0) {
    for (int r = 0; r < world_size; ++r) {
      if (outcome[r] != -1) continue;
      int wstatus = 0;
      if (waitpid(pids[r], &wstatus, WNOHANG) == pids[r]) {
        outcome[r] = Outcome(wstatus);
        --running;
      }
    }
    if (running > 0 && !killed && absl::Now() > deadline) {
      for (int r = 0; r < world_size; ++r) {
        if (outcome[r] == -1) kill(pids[r], SIGKILL);
      }
      killed = true;
    }
    if (running > 0) absl::SleepFor(absl::Milliseconds(2));
  }
  return outcome;
}

}  // namespace weir::parallel
