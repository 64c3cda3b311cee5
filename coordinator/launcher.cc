#include "coordinator/launcher.h"

#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "base/logging.h"
#include "base/signals.h"

namespace weir::coordinator {

std::string ChildExit::Describe() const {
  if (signal != 0) return absl::StrCat("killed by signal ", signal, " (", strsignal(signal), ")");
  return absl::StrCat("exited with code ", exit_code);
}

Launcher::Launcher(std::function<void(const ChildExit&)> on_exit)
    : on_exit_(std::move(on_exit)), reaper_([this] { ReapLoop(); }) {}

Launcher::~Launcher() {
  SignalAll(SIGKILL);
  WaitAllExited(absl::Seconds(10));
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  reaper_.join();
}

absl::StatusOr<pid_t> Launcher::Spawn(const std::string& name,
                                      const std::vector<std::string>& argv) {
  if (argv.empty()) return absl::InvalidArgumentError("Spawn: empty argv for " + name);
  // Everything the child needs is prepared before fork: between fork and exec
  // only async-signal-safe calls are allowed in a multi-threaded process.
  std::vector<char*> args;
  args.reserve(argv.size() + 1);
  for (const std::string& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
  args.push_back(nullptr);
  const pid_t parent = getpid();

  absl::MutexLock lock(&mu_);  // The reaper must not see the pid before we record it.
  // vfork, not fork: no pthread_atfork handlers run, so gRPC's fork handling
  // never touches the pollers of the coordinator's other threads (with fork,
  // a poller thread was seen dying in epoll_wait on a closed descriptor). The
  // child only makes the system calls below, on memory prepared before.
  // Every signal stays blocked across vfork (the child shares our memory
  // until exec, so none of our handlers may run in it); the child resets
  // the dispositions and then unblocks (ResetSignalsInChild).
  sigset_t all, before;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &before);
  const pid_t pid = vfork();
  if (pid != 0) pthread_sigmask(SIG_SETMASK, &before, nullptr);
  if (pid < 0) return absl::InternalError(absl::StrCat("fork failed for ", name, ": ", strerror(errno)));
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    // The parent may have died between fork and prctl.
    if (getppid() != parent) _exit(1);
    setpgid(0, 0);
    ResetSignalsInChild();
    execv(args[0], args.data());
    _exit(127);
  }
  running_[pid] = name;
  WEIR_LOG(INFO) << "started " << name << " (pid " << pid << ")";
  return pid;
}

void Launcher::SignalAll(int signo) {
  absl::MutexLock lock(&mu_);
  for (const auto& [pid, name] : running_) kill(pid, signo);
}

bool Launcher::KillMatching(const std::string& prefix, absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto matching = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    int n = 0;
    for (const auto& [pid, name] : running_) n += name.rfind(prefix, 0) == 0;
    return n;
  };
  for (const auto& [pid, name] : running_) {
    if (name.rfind(prefix, 0) == 0) kill(pid, SIGKILL);
  }
  auto gone = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return matching() == 0 && callbacks_pending_ == 0;
  };
  return mu_.AwaitWithTimeout(absl::Condition(&gone), timeout);
}

void Launcher::StopAll(absl::Duration grace) {
  SignalAll(SIGTERM);
  if (WaitAllExited(grace)) return;
  for (pid_t pid : running()) WEIR_LOG(WARNING) << "pid " << pid << " ignored SIGTERM; killing";
  SignalAll(SIGKILL);
  WaitAllExited(absl::Seconds(10));
}

bool Launcher::WaitAllExited(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto none_running = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return running_.empty() && callbacks_pending_ == 0;
  };
  return mu_.AwaitWithTimeout(absl::Condition(&none_running), timeout);
}

std::vector<pid_t> Launcher::running() const {
  absl::MutexLock lock(&mu_);
  std::vector<pid_t> pids;
  for (const auto& [pid, name] : running_) pids.push_back(pid);
  return pids;
}

void Launcher::ReapLoop() {
  while (true) {
    std::vector<ChildExit> exits;
    {
      absl::MutexLock lock(&mu_);
      if (stopping_ && running_.empty()) return;
      for (auto it = running_.begin(); it != running_.end();) {
        int status = 0;
        const pid_t pid = it->first;
        if (waitpid(pid, &status, WNOHANG) == pid) {
          ChildExit exit{.pid = pid, .name = it->second};
          if (WIFSIGNALED(status)) exit.signal = WTERMSIG(status);
          if (WIFEXITED(status)) exit.exit_code = WEXITSTATUS(status);
          exits.push_back(exit);
          ++callbacks_pending_;
          running_.erase(it++);
        } else {
          ++it;
        }
      }
    }
    for (const ChildExit& exit : exits) {
      WEIR_LOG(INFO) << exit.name << " (pid " << exit.pid << ") " << exit.Describe();
      if (on_exit_) on_exit_(exit);
      absl::MutexLock lock(&mu_);
      --callbacks_pending_;
    }
    // Polling keeps the reaper independent of SIGCHLD delivery, which the
    // coordinator's signal thread does not own; 50 ms bounds detection time.
    absl::SleepFor(absl::Milliseconds(50));
  }
}

}  // namespace weir::coordinator
