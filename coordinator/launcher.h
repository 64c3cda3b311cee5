// coordinator/launcher.h
//
// Launcher starts the processes of a local cluster (workers, EPLB) as children
// of the coordinator and guarantees they never outlive it: each child gets
// PR_SET_PDEATHSIG(SIGKILL), so it dies with the coordinator even when the
// coordinator is SIGKILLed, and runs in its own process group so a terminal's
// Ctrl-C reaches only the coordinator, which then shuts children down in order.
//
// Thread safety: thread-safe. `on_exit` callbacks run on the reaper thread.
//
//   Launcher launcher([](const ChildExit& e) { ... });
//   ASSIGN_OR_RETURN(pid_t pid, launcher.Spawn("worker 0", {path, "--rank=0"}));
//   ...
//   launcher.StopAll(absl::Seconds(5));  // SIGTERM, wait, then SIGKILL

#ifndef WEIR_COORDINATOR_LAUNCHER_H_
#define WEIR_COORDINATOR_LAUNCHER_H_

#include <sys/types.h>

#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace weir::coordinator {

struct ChildExit {
  pid_t pid = 0;
  std::string name;
  // Exactly one of these is set: the exit code, or the terminating signal.
  int exit_code = -1;
  int signal = 0;
  // "exited with code 1", "killed by signal 9 (Killed)".
  std::string Describe() const;
};

class Launcher {
 public:
  // `on_exit` is called once per child that ends, on the reaper thread; it
  // must not call back into the Launcher. May be empty.
  explicit Launcher(std::function<void(const ChildExit&)> on_exit);
  // Kills (SIGKILL) and reaps every child still running.
  ~Launcher();

  Launcher(const Launcher&) = delete;
  Launcher& operator=(const Launcher&) = delete;

  // Starts `argv[0]` with `argv`. `name` is for logs. Returns the pid, or
  // INVALID_ARGUMENT for an empty argv, or INTERNAL if fork/exec fails (an exec
  // failure shows up as the child exiting with code 127).
  absl::StatusOr<pid_t> Spawn(const std::string& name, const std::vector<std::string>& argv);

  // Sends `signo` to every running child.
  void SignalAll(int signo);

  // SIGKILLs every running child whose name starts with `prefix` and waits
  // up to `timeout` until they are reaped and their on_exit callbacks have
  // returned. True if so (false on timeout).
  bool KillMatching(const std::string& prefix, absl::Duration timeout);
  // Sends SIGTERM to every running child, waits up to `grace` for them to end,
  // then SIGKILLs the rest and waits for them. Returns once none is running.
  void StopAll(absl::Duration grace);

  // Waits up to `timeout` until no child is running and every on_exit
  // callback has returned. Returns true if so.
  bool WaitAllExited(absl::Duration timeout);

  // Pids of children still running.
  std::vector<pid_t> running() const;

 private:
  void ReapLoop();

  std::function<void(const ChildExit&)> on_exit_;
  mutable absl::Mutex mu_;
  // Guarded by mu_.
  absl::flat_hash_map<pid_t, std::string> running_ ABSL_GUARDED_BY(mu_);
  // Exits whose on_exit callback has not returned yet.
  int callbacks_pending_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread reaper_;
};

}  // namespace weir::coordinator

#endif  // WEIR_COORDINATOR_LAUNCHER_H_
