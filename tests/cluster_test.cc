// Launches the real weir binaries on loopback and checks the cluster's
// lifecycle: start-up and registration, readiness through health, detection
// of a killed worker, clean shutdown, and that no process outlives its
// coordinator (also when the coordinator is SIGKILLed, and for remote workers
// that lose their coordinator).

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <regex>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "base/grpc_util.h"
#include "gtest/gtest.h"
#include "proto/inference.grpc.pb.h"

namespace weir {
namespace {

std::string Runfile(const std::string& path) {
  return std::string(std::getenv("TEST_SRCDIR")) + "/weir/" + path;
}

// The random-weight tiny: the embedded default is trained, so a long greedy run
// may end at its end-of-sequence token before max_tokens.
std::string RandomTiny() { return "--model_dir=" + Runfile("models/random/tiny"); }

// A child process whose stdout the test reads line by line.
struct Process {
  pid_t pid = -1;
  int stdout_fd = -1;
  std::string buffer;

  Process() = default;
  Process(Process&& other) noexcept
      : pid(std::exchange(other.pid, -1)),
        stdout_fd(std::exchange(other.stdout_fd, -1)),
        buffer(std::move(other.buffer)) {}
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  static Process Start(const std::vector<std::string>& argv) {
    int pipe_fds[2];
    EXPECT_EQ(pipe(pipe_fds), 0);
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    Process p;
    p.pid = fork();
    if (p.pid == 0) {
      dup2(pipe_fds[1], STDOUT_FILENO);
      close(pipe_fds[0]);
      execv(args[0], args.data());
      _exit(127);
    }
    close(pipe_fds[1]);
    p.stdout_fd = pipe_fds[0];
    return p;
  }

  // Reads stdout until a line matches `pattern`; returns its first group.
  std::string WaitForLine(const std::regex& pattern, absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    while (absl::Now() < deadline) {
      size_t newline;
      while ((newline = buffer.find('\n')) != std::string::npos) {
        std::string line = buffer.substr(0, newline);
        buffer.erase(0, newline + 1);
        std::smatch match;
        if (std::regex_search(line, match, pattern)) return match[1];
      }
      pollfd pfd{.fd = stdout_fd, .events = POLLIN};
      if (poll(&pfd, 1, 100) > 0) {
        char chunk[4096];
        ssize_t n = read(stdout_fd, chunk, sizeof(chunk));
        if (n <= 0) return "";
        buffer.append(chunk, n);
      }
    }
    return "";
  }

  // Waits for exit; returns the wait status, or -1 on timeout.
  int Wait(absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    while (absl::Now() < deadline) {
      int status = 0;
      if (waitpid(pid, &status, WNOHANG) == pid) {
        pid = -1;
        return status;
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
    return -1;
  }

  ~Process() {
    if (pid > 0) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
    if (stdout_fd >= 0) close(stdout_fd);
  }
};

// Pids whose parent is `parent`, from /proc.
std::vector<pid_t> ChildrenOf(pid_t parent) {
  std::vector<pid_t> children;
  std::ifstream list("/proc/" + std::to_string(parent) + "/task/" + std::to_string(parent) +
                     "/children");
  pid_t pid;
  while (list >> pid) children.push_back(pid);
  return children;
}

// True while `pid` exists and is not a zombie.
bool Alive(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  if (!stat) return false;
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const size_t paren = text.rfind(')');
  return paren != std::string::npos && paren + 2 < text.size() && text[paren + 2] != 'Z';
}

bool AllGone(const std::vector<pid_t>& pids, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    bool any = false;
    for (pid_t pid : pids) any |= Alive(pid);
    if (!any) return true;
    absl::SleepFor(absl::Milliseconds(50));
  }
  return false;
}

v1::ServerState GetState(v1::Inference::Stub& stub) {
  grpc::ClientContext context;
  context.set_deadline(DeadlineIn(std::chrono::seconds(5)));
  v1::ServerState state;
  grpc::Status status = stub.GetServerState(&context, v1::GetServerStateRequest(), &state);
  EXPECT_TRUE(status.ok()) << status.error_message();
  return state;
}

std::string Health(const std::string& address, const std::string& service) {
  auto channel = MakeChannel(address);
  absl::StatusOr<std::string> status = CheckHealth(*channel, service, std::chrono::seconds(2));
  return status.ok() ? *status : status.status().ToString();
}

const std::regex kReadyLine(R"(^weir ready at (\S+) )");

// How long a test waits for something that happens within a second or two
// when the machine is idle (a death noticed, a child gone, a drained exit):
// generous, so a loaded CI machine does not fail it; a wait ends as soon as
// the event happens.
constexpr absl::Duration kEventDeadline = absl::Seconds(60);

TEST(ClusterTest, LocalClusterStartsDetectsDeathAndStopsCleanly) {
  // Detection only: no replacement group (recovery_test covers that).
  Process coordinator = Process::Start({Runfile("coordinator/main"), "--listen=127.0.0.1:0", RandomTiny(),
                                        "--workers=3", "--health_interval_ms=200",
                                        "--recover_workers=false"});
  const std::string address = coordinator.WaitForLine(kReadyLine, absl::Seconds(60));
  ASSERT_FALSE(address.empty()) << "no ready line";

  // Every process is up and ready, and says so through health.
  EXPECT_EQ(Health(address, ""), "SERVING");
  EXPECT_EQ(Health(address, "weir.v1.Inference"), "SERVING");
  auto stub = v1::Inference::NewStub(MakeChannel(address));
  v1::ServerState state = GetState(*stub);
  EXPECT_EQ(state.lifecycle(), v1::LIFECYCLE_READY);
  ASSERT_EQ(state.workers_size(), 3);
  for (const v1::ServerState::Worker& w : state.workers()) {
    EXPECT_EQ(w.state(), v1::WORKER_STATE_READY) << w.rank();
    EXPECT_EQ(Health(w.address(), "weir.v1.Worker"), "SERVING") << w.rank();
  }
  ASSERT_FALSE(state.eplb_address().empty());
  EXPECT_EQ(Health(state.eplb_address(), "weir.v1.Eplb"), "SERVING");
  const std::vector<pid_t> children = ChildrenOf(coordinator.pid);
  EXPECT_EQ(children.size(), 4u);  // 3 workers + EPLB.
  // The children register with and watch the control-plane server: its own
  // port (and threads), serving the Coordinator service, not the public API.
  for (pid_t child : children) {
    std::ifstream cmdline("/proc/" + std::to_string(child) + "/cmdline");
    std::string arg, control;
    while (std::getline(cmdline, arg, '\0')) {
      if (arg.rfind("--coordinator=", 0) == 0) control = arg.substr(14);
    }
    ASSERT_FALSE(control.empty()) << "child " << child;
    EXPECT_NE(control, address);
    EXPECT_EQ(Health(control, "weir.v1.Coordinator"), "SERVING");
    EXPECT_NE(Health(control, "weir.v1.Inference"), "SERVING");
  }

  // A worker dies: the coordinator notices and stops claiming readiness.
  const pid_t victim = static_cast<pid_t>(state.workers(1).pid());
  ASSERT_EQ(kill(victim, SIGKILL), 0);
  const absl::Time deadline = absl::Now() + kEventDeadline;
  bool reported = false;
  while (!reported && absl::Now() < deadline) {
    state = GetState(*stub);
    reported = state.workers(1).state() == v1::WORKER_STATE_DEAD;
    if (!reported) absl::SleepFor(absl::Milliseconds(50));
  }
  ASSERT_TRUE(reported) << "coordinator did not report the dead worker";
  EXPECT_NE(state.workers(1).detail().find("signal 9"), std::string::npos)
      << state.workers(1).detail();
  EXPECT_EQ(state.lifecycle(), v1::LIFECYCLE_DEGRADED);
  EXPECT_EQ(state.workers(0).state(), v1::WORKER_STATE_READY);
  EXPECT_EQ(Health(address, "weir.v1.Inference"), "NOT_SERVING");

  // SIGTERM: drain, stop the children, exit 0, leave nothing behind.
  ASSERT_EQ(kill(coordinator.pid, SIGTERM), 0);
  const int status = coordinator.Wait(kEventDeadline);
  ASSERT_NE(status, -1) << "coordinator did not exit";
  EXPECT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_TRUE(AllGone(children, kEventDeadline));
}

// SIGTERM with a request in flight: the stream runs to its end (every token,
// reason MAX_TOKENS), the coordinator then exits 0 and leaves no child behind.
TEST(ClusterTest, SigtermLetsInFlightRequestsFinish) {
  Process coordinator = Process::Start({Runfile("coordinator/main"), "--listen=127.0.0.1:0", RandomTiny(),
                                        "--workers=1", "--eplb=false", "--drain_timeout_s=60"});
  const std::string address = coordinator.WaitForLine(kReadyLine, absl::Seconds(60));
  ASSERT_FALSE(address.empty()) << "no ready line";
  const std::vector<pid_t> children = ChildrenOf(coordinator.pid);
  auto stub = v1::Inference::NewStub(MakeChannel(address));
  v1::GenerateRequest request;
  for (uint32_t t : {5u, 6u, 7u}) request.mutable_tokens()->add_ids(t);
  constexpr uint32_t kTokens = 400;
  request.mutable_stop()->set_max_new_tokens(kTokens);
  request.mutable_stop()->set_ignore_eos(true);
  request.mutable_sampling()->set_temperature(0.0f);
  request.mutable_output()->set_stream_tokens(true);
  grpc::ClientContext context;
  context.set_deadline(DeadlineIn(std::chrono::seconds(120)));
  auto reader = stub->Generate(&context, request);
  v1::GenerateEvent event;
  int64_t streamed = 0;
  bool signalled = false, final_seen = false;
  v1::FinishReason reason = v1::FINISH_REASON_UNSPECIFIED;
  int64_t final_tokens = 0;
  while (reader->Read(&event)) {
    if (event.has_final()) {
      final_seen = true;
      reason = event.final().reason();
      final_tokens = event.final().full_token_ids_size();
    }
    if (event.has_delta()) streamed += event.delta().token_ids_size();
    if (!signalled && streamed > 0) {  // mid-stream
      ASSERT_EQ(kill(coordinator.pid, SIGTERM), 0);
      signalled = true;
    }
  }
  const grpc::Status finished = reader->Finish();
  EXPECT_TRUE(finished.ok()) << finished.error_message();
  EXPECT_TRUE(signalled);
  EXPECT_TRUE(final_seen);
  EXPECT_EQ(reason, v1::FINISH_REASON_MAX_TOKENS);
  // Streamed, every token arrives in a Delta (the Final repeats none).
  EXPECT_EQ(streamed + final_tokens, kTokens);
  const int status = coordinator.Wait(kEventDeadline);
  ASSERT_NE(status, -1) << "coordinator did not exit";
  EXPECT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_TRUE(AllGone(children, kEventDeadline));
}

TEST(ClusterTest, ChildrenDieWithAKilledCoordinator) {
  Process coordinator =
      Process::Start({Runfile("coordinator/main"), "--listen=127.0.0.1:0", RandomTiny(), "--workers=2"});
  ASSERT_FALSE(coordinator.WaitForLine(kReadyLine, absl::Seconds(60)).empty());
  const std::vector<pid_t> children = ChildrenOf(coordinator.pid);
  ASSERT_EQ(children.size(), 3u);
  ASSERT_EQ(kill(coordinator.pid, SIGKILL), 0);
  ASSERT_NE(coordinator.Wait(kEventDeadline), -1);
  EXPECT_TRUE(AllGone(children, kEventDeadline));
}

TEST(ClusterTest, RemoteWorkersRegisterAndFenceThemselvesWhenCoordinatorDies) {
  const std::string address_file = std::string(std::getenv("TEST_TMPDIR")) + "/coordinator.addr";
  // Detection only: without --recover_workers=false the lost rank would be
  // freed for a rejoin (tests/rejoin_test) instead of staying DEAD.
  Process coordinator = Process::Start({Runfile("coordinator/main"), "--listen=127.0.0.1:0", RandomTiny(),
                                        "--expect_workers=2", "--eplb=false",
                                        "--recover_workers=false",
                                        "--address_file=" + address_file});
  std::string address;
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (address.empty() && absl::Now() < deadline) {
    std::ifstream(address_file) >> address;
    if (address.empty()) absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_FALSE(address.empty()) << "no --address_file written";
  // In multi-node mode the coordinator starts no process of its own.
  EXPECT_TRUE(ChildrenOf(coordinator.pid).empty());

  std::vector<std::unique_ptr<Process>> workers;
  for (int i = 0; i < 2; ++i) {
    workers.push_back(std::make_unique<Process>(Process::Start(
        {Runfile("worker/main"), "--coordinator=" + address, "--coordinator_timeout_s=2"})));
  }
  ASSERT_EQ(coordinator.WaitForLine(kReadyLine, absl::Seconds(60)), address);
  auto stub = v1::Inference::NewStub(MakeChannel(address));
  v1::ServerState state = GetState(*stub);
  ASSERT_EQ(state.workers_size(), 2);
  for (const v1::ServerState::Worker& w : state.workers()) {
    EXPECT_EQ(w.state(), v1::WORKER_STATE_READY);
  }

  // A remote worker dies: no exit report reaches the coordinator, so its
  // health checks must find out.
  const int victim_rank = state.workers(1).pid() == workers[1]->pid ? 1 : 0;
  ASSERT_EQ(kill(workers[1]->pid, SIGKILL), 0);
  ASSERT_NE(workers[1]->Wait(kEventDeadline), -1);
  const absl::Time dead_by = absl::Now() + kEventDeadline;
  bool reported = false;
  while (!reported && absl::Now() < dead_by) {
    state = GetState(*stub);
    reported = state.workers(victim_rank).state() == v1::WORKER_STATE_DEAD;
    if (!reported) absl::SleepFor(absl::Milliseconds(100));
  }
  ASSERT_TRUE(reported) << "coordinator did not notice the dead remote worker";
  EXPECT_NE(state.workers(victim_rank).detail().find("health check failed"), std::string::npos)
      << state.workers(victim_rank).detail();
  EXPECT_EQ(Health(address, "weir.v1.Inference"), "NOT_SERVING");
  workers.pop_back();

  // The coordinator vanishes without a word: the remaining worker notices and exits.
  ASSERT_EQ(kill(coordinator.pid, SIGKILL), 0);
  for (auto& worker : workers) {
    const int status = worker->Wait(kEventDeadline);
    ASSERT_NE(status, -1) << "worker outlived its coordinator";
    EXPECT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 1);
  }
}

}  // namespace
}  // namespace weir
