// tools/bench/serve_cluster.h
//
// The benchmarks' own cluster: the coordinator binary started as a child
// process on a free loopback port (it spawns the workers and EPLB itself),
// readiness through grpc.health.v1, and the CPU time of a process from
// /proc, which the serving benchmark turns into coordinator CPU per step.
//
// Thread safety: LocalCluster is not thread-safe (one owner thread); the free
// functions are thread-safe.

#ifndef WEIR_TOOLS_BENCH_SERVE_CLUSTER_H_
#define WEIR_TOOLS_BENCH_SERVE_CLUSTER_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace weir::bench {

struct LocalClusterOptions {
  // The coordinator executable.
  std::string coordinator_binary;
  // Worker processes the coordinator starts (--workers).
  int workers = 2;
  // Further coordinator flags, e.g. "--zero_overhead=false".
  std::vector<std::string> extra_flags;
  // Set (or overridden) in the child's environment, e.g. the runfiles
  // variables that let the coordinator find the worker binary and the model.
  std::vector<std::pair<std::string, std::string>> env;
  // Directory for the address file and the coordinator's log; must exist.
  std::string work_dir;
  absl::Duration startup_timeout = absl::Seconds(120);
};

// A coordinator child process serving on 127.0.0.1:<free port>.
//
//   auto cluster = LocalCluster::Start(options);
//   if (!cluster.ok()) { print cluster.status(); }
//   ... (*cluster)->address() ...
//   absl::Status stopped = (*cluster)->Stop();
//
// The child gets PR_SET_PDEATHSIG(SIGKILL), so it never outlives this process;
// its own children die with it the same way. Its stdout and stderr go to
// `<work_dir>/coordinator.log`.
class LocalCluster {
 public:
  // Starts the coordinator and waits until `weir.v1.Inference` is SERVING.
  // Returns UNAVAILABLE (with the exit status and the log's last lines) if the
  // child exits first, DEADLINE_EXCEEDED (after killing it) if it is not
  // serving within the startup timeout, INTERNAL if it cannot be started.
  static absl::StatusOr<std::unique_ptr<LocalCluster>> Start(const LocalClusterOptions& options);

  // Stops the child (Stop) if still running.
  ~LocalCluster();

  LocalCluster(const LocalCluster&) = delete;
  LocalCluster& operator=(const LocalCluster&) = delete;

  // "127.0.0.1:PORT" the coordinator listens on.
  const std::string& address() const { return address_; }
  pid_t pid() const { return pid_; }
  // LocalClusterOptions::work_dir (the address file and the log).
  const std::string& work_dir() const { return work_dir_; }

  // Returns OK while the child runs; UNAVAILABLE describing its exit (and the
  // log's last lines) once it has exited.
  absl::Status CheckAlive();

  // Sends SIGTERM (the coordinator drains and stops its children), waits up to
  // `grace`, then SIGKILLs. Returns OK if it exited with status 0, INTERNAL
  // otherwise. Idempotent.
  absl::Status Stop(absl::Duration grace = absl::Seconds(20));

  // The last `lines` lines of the coordinator's log.
  std::string LogTail(int lines) const;

 private:
  LocalCluster(pid_t pid, std::string work_dir, std::string log_path)
      : pid_(pid), work_dir_(std::move(work_dir)), log_path_(std::move(log_path)) {}

  // Reaps the child without blocking; true once it has exited.
  bool Reap();

  pid_t pid_;
  std::string work_dir_;
  std::string log_path_;
  std::string address_;
  bool exited_ = false;
  int wait_status_ = 0;
};

// A benchmark's own cluster: LocalCluster::Start with `options` completed:
// the coordinator at options.coordinator_binary, or when empty the one built
// with this program (found in the runfiles of `argv0`); options.env the
// runfiles' variables (so the coordinator finds the worker, EPLB and the
// model); options.work_dir a fresh $TMPDIR/weir_<name>_bench.XXXXXX. Prints
// the command line to stderr, prefixed with `name`. NOT_FOUND without a
// coordinator, INTERNAL when the directory cannot be made; LocalCluster::Start's
// errors otherwise. The caller removes work_dir() when it is done with the log.
absl::StatusOr<std::unique_ptr<LocalCluster>> StartBenchCluster(const char* argv0,
                                                                const std::string& name,
                                                                LocalClusterOptions options);

// Waits until `service` on `address` reports SERVING through grpc.health.v1.
// Returns DEADLINE_EXCEEDED with the last answer if it does not within
// `timeout`.
absl::Status WaitForServing(const std::string& address, const std::string& service,
                            absl::Duration timeout);

// Returns the user + system CPU time of process `pid` in seconds, from
// /proc/<pid>/stat (clock-tick resolution). NOT_FOUND if there is no such
// process, INTERNAL if the file cannot be parsed.
absl::StatusOr<double> ProcessCpuSeconds(pid_t pid);

}  // namespace weir::bench

#endif  // WEIR_TOOLS_BENCH_SERVE_CLUSTER_H_
