#include "tools/bench/serve_cluster.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "base/grpc_util.h"
#include "tools/cpp/runfiles/runfiles.h"

extern char** environ;

namespace weir::bench {
namespace {

std::string DescribeWaitStatus(int status) {
  if (WIFEXITED(status)) return absl::StrCat("exited with status ", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return absl::StrCat("killed by signal ", WTERMSIG(status));
  return absl::StrCat("wait status ", status);
}

// The parent's environment with `overrides` applied, as KEY=VALUE strings.
std::vector<std::string> ChildEnvironment(
    const std::vector<std::pair<std::string, std::string>>& overrides) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry(*e);
    const std::string key = entry.substr(0, entry.find('='));
    bool overridden = false;
    for (const auto& [k, v] : overrides) overridden |= (k == key);
    if (!overridden) env.push_back(entry);
  }
  for (const auto& [k, v] : overrides) env.push_back(k + "=" + v);
  return env;
}

}  // namespace

absl::StatusOr<std::unique_ptr<LocalCluster>> LocalCluster::Start(
    const LocalClusterOptions& options) {
  if (access(options.coordinator_binary.c_str(), X_OK) != 0) {
    return absl::InternalError(
        absl::StrCat("coordinator binary not executable: '", options.coordinator_binary, "'"));
  }
  const std::string address_file = options.work_dir + "/address";
  const std::string log_path = options.work_dir + "/coordinator.log";
  unlink(address_file.c_str());
  std::vector<std::string> args = {options.coordinator_binary, "--listen=127.0.0.1:0",
                                   "--address_file=" + address_file,
                                   absl::StrCat("--workers=", options.workers)};
  args.insert(args.end(), options.extra_flags.begin(), options.extra_flags.end());
  std::vector<std::string> env = ChildEnvironment(options.env);
  // Everything the child touches is prepared before fork: only
  // async-signal-safe calls run between fork and exec.
  std::vector<char*> argv, envp;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (std::string& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  const int log_fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (log_fd < 0) {
    return absl::InternalError(absl::StrCat("cannot create ", log_path, ": ", strerror(errno)));
  }
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    close(log_fd);
    return absl::InternalError(absl::StrCat("fork: ", strerror(errno)));
  }
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);
    dup2(log_fd, STDOUT_FILENO);
    dup2(log_fd, STDERR_FILENO);
    execve(argv[0], argv.data(), envp.data());
    _exit(127);
  }
  close(log_fd);
  std::unique_ptr<LocalCluster> cluster(new LocalCluster(pid, options.work_dir, log_path));

  const absl::Time deadline = absl::Now() + options.startup_timeout;
  std::string last = "no address yet";
  while (absl::Now() < deadline) {
    if (cluster->Reap()) return cluster->CheckAlive();
    if (cluster->address_.empty()) {
      std::ifstream(address_file) >> cluster->address_;
    }
    if (!cluster->address_.empty()) {
      auto channel = MakeChannel(cluster->address_);
      absl::StatusOr<std::string> health =
          CheckHealth(*channel, "weir.v1.Inference", std::chrono::seconds(1));
      if (health.ok() && *health == "SERVING") return cluster;
      last = health.ok() ? *health : health.status().ToString();
    }
    absl::SleepFor(absl::Milliseconds(100));
  }
  std::string tail = cluster->LogTail(20);
  cluster->Stop(absl::Seconds(2)).IgnoreError();
  return absl::DeadlineExceededError(
      absl::StrCat("coordinator not serving after ", absl::FormatDuration(options.startup_timeout),
                   " (", last, "); log ", log_path, " ends:\n", tail));
}

LocalCluster::~LocalCluster() { Stop().IgnoreError(); }

bool LocalCluster::Reap() {
  if (exited_) return true;
  int status = 0;
  if (waitpid(pid_, &status, WNOHANG) == pid_) {
    exited_ = true;
    wait_status_ = status;
  }
  return exited_;
}

absl::Status LocalCluster::CheckAlive() {
  if (!Reap()) return absl::OkStatus();
  return absl::UnavailableError(absl::StrCat("coordinator (pid ", pid_, ") ",
                                             DescribeWaitStatus(wait_status_), "; log ",
                                             log_path_, " ends:\n", LogTail(20)));
}

absl::Status LocalCluster::Stop(absl::Duration grace) {
  if (!Reap()) {
    kill(pid_, SIGTERM);
    const absl::Time deadline = absl::Now() + grace;
    while (!Reap() && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(20));
    if (!Reap()) {
      kill(pid_, SIGKILL);
      int status = 0;
      waitpid(pid_, &status, 0);
      exited_ = true;
      wait_status_ = status;
      return absl::InternalError(
          absl::StrCat("coordinator did not stop within ", absl::FormatDuration(grace)));
    }
  }
  if (WIFEXITED(wait_status_) && WEXITSTATUS(wait_status_) == 0) return absl::OkStatus();
  return absl::InternalError(absl::StrCat("coordinator ", DescribeWaitStatus(wait_status_)));
}

std::string LocalCluster::LogTail(int lines) const {
  std::ifstream in(log_path_);
  std::deque<std::string> tail;
  for (std::string line; std::getline(in, line);) {
    tail.push_back(line);
    if (static_cast<int>(tail.size()) > lines) tail.pop_front();
  }
  std::string out;
  for (const std::string& line : tail) absl::StrAppend(&out, "  ", line, "\n");
  return out;
}

absl::StatusOr<std::unique_ptr<LocalCluster>> StartBenchCluster(const char* argv0,
                                                                const std::string& name,
                                                                LocalClusterOptions options) {
  using bazel::tools::cpp::runfiles::Runfiles;
  std::string error;
  std::unique_ptr<Runfiles> runfiles(Runfiles::Create(argv0, &error));
  if (options.coordinator_binary.empty() && runfiles != nullptr) {
    options.coordinator_binary = runfiles->Rlocation("weir/coordinator/main");
  }
  if (options.coordinator_binary.empty()) {
    return absl::NotFoundError(absl::StrCat("cannot find the coordinator in the runfiles (", error,
                                            "); run through bazel or pass --coordinator_binary"));
  }
  if (runfiles != nullptr) options.env = runfiles->EnvVars();
  // The random-weight tiny unless a flag names a model: the recorded numbers are on it,
  // and the trained default ends some generations early at its end-of-sequence token.
  const bool has_model = std::any_of(
      options.extra_flags.begin(), options.extra_flags.end(),
      [](const std::string& f) { return f.rfind("--model_dir=", 0) == 0; });
  if (!has_model && runfiles != nullptr) {
    options.extra_flags.push_back("--model_dir=" + runfiles->Rlocation("weir/models/random/tiny"));
  }
  const char* tmp = std::getenv("TMPDIR");
  options.work_dir = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/weir_", name, "_bench.XXXXXX");
  if (mkdtemp(options.work_dir.data()) == nullptr) {
    return absl::InternalError(absl::StrCat("cannot create ", options.work_dir));
  }
  std::fprintf(stderr, "%s: starting %s --workers=%d %s\n", name.c_str(),
               options.coordinator_binary.c_str(), options.workers,
               absl::StrJoin(options.extra_flags, " ").c_str());
  return LocalCluster::Start(options);
}

absl::Status WaitForServing(const std::string& address, const std::string& service,
                            absl::Duration timeout) {
  auto channel = MakeChannel(address);
  const absl::Time deadline = absl::Now() + timeout;
  std::string last;
  do {
    absl::StatusOr<std::string> health = CheckHealth(*channel, service, std::chrono::seconds(1));
    if (health.ok() && *health == "SERVING") return absl::OkStatus();
    last = health.ok() ? *health : health.status().ToString();
    absl::SleepFor(absl::Milliseconds(100));
  } while (absl::Now() < deadline);
  return absl::DeadlineExceededError(absl::StrCat(service, " at ", address, " not SERVING after ",
                                                  absl::FormatDuration(timeout), ": ", last));
}

absl::StatusOr<double> ProcessCpuSeconds(pid_t pid) {
  const std::string path = absl::StrCat("/proc/", pid, "/stat");
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("no process ", pid));
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string stat = buffer.str();
  // "pid (comm) state ppid ...": comm may hold spaces and parentheses, so the
  // fields are counted from the last ')'. utime and stime are fields 14, 15.
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return absl::InternalError("cannot parse " + path);
  std::vector<absl::string_view> fields =
      absl::StrSplit(absl::string_view(stat).substr(close + 1), ' ', absl::SkipEmpty());
  uint64_t utime = 0, stime = 0;
  if (fields.size() < 13 || !absl::SimpleAtoi(fields[11], &utime) ||
      !absl::SimpleAtoi(fields[12], &stime)) {
    return absl::InternalError("cannot parse " + path);
  }
  return static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

}  // namespace weir::bench
