// tests/rejoin_test.cc
//
// Remote workers and the group epoch (tiny model on CPU, 2 workers started
// apart from the coordinator, --expect_workers=2, as on several machines):
//
// * a worker killed mid-generation is restarted by hand (as an operator or
//   a supervisor would, without --rank): while the coordinator waits for it,
//   GetServerState and `weir info` list the rank as waiting (since when,
//   until when); then the group comes up at a new group epoch (the survivor
//   re-initialises its communicators), and every request in flight ends with
//   the tokens of an undisturbed run;
// * a spare worker started while every rank is held keeps retrying its
//   registration, and takes the rank of a worker killed later;
// * a worker that never comes back: past --rejoin_timeout_s the server is
//   NOT_SERVING, new requests are UNAVAILABLE and GetServerState says why;
// * a stopped worker (SIGSTOP) is replaced while it sleeps, with a collective
//   timeout of 10 minutes: the survivor's step, stuck in a collective with
//   the stopped peer, is aborted by the new group's Init, so the recovery
//   does not wait for that timeout. Woken up (SIGCONT), the old worker finds
//   itself replaced and exits (code 3, the reason in its log); the survivor
//   refuses the old epoch, and no request is affected.

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/grpc_util.h"
#include "gtest/gtest.h"
#include "proto/inference.grpc.pb.h"
#include "proto/worker.grpc.pb.h"
#include "tests/local_cluster.h"

namespace weir {
namespace {

constexpr int kRequests = 8;
constexpr uint32_t kTokens = 160;
// Generous: an event this test waits for ends the wait when it comes.
const absl::Duration kEventDeadline = absl::Seconds(120);

using testing_util::Runfile;

// A child process, SIGKILLed and reaped at destruction unless reaped before;
// its stdout and stderr go to `log` when given.
class Child {
 public:
  explicit Child(std::vector<std::string> argv, const std::string& log = "") {
    std::vector<char*> args;
    for (std::string& a : argv) args.push_back(a.data());
    args.push_back(nullptr);
    pid_ = fork();
    if (pid_ == 0) {
      if (!log.empty()) {
        const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) {
          dup2(fd, 1);
          dup2(fd, 2);
        }
      }
      execv(args[0], args.data());
      _exit(127);
    }
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  ~Child() { Kill(); }

  pid_t pid() const { return pid_; }
  bool Signal(int signo) const { return pid_ > 0 && kill(pid_, signo) == 0; }
  void Kill() {
    if (pid_ <= 0) return;
    kill(pid_, SIGCONT);
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  // SIGTERM; returns the wait status (or -1 if it did not exit in time).
  int Stop(absl::Duration timeout) {
    if (pid_ <= 0) return -1;
    kill(pid_, SIGTERM);
    return Wait(timeout);
  }
  // True while the process has not exited (reaps it if it has).
  bool Running() {
    if (pid_ <= 0) return false;
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) != pid_) return true;
    pid_ = -1;
    exit_status_ = status;
    return false;
  }
  // Waits for the process to exit by itself; returns the wait status (or -1
  // if it did not exit in time).
  int Wait(absl::Duration timeout) {
    if (pid_ <= 0) return exit_status_;
    const absl::Time until = absl::Now() + timeout;
    while (absl::Now() < until) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        exit_status_ = status;
        return status;
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
    return -1;
  }

 private:
  pid_t pid_ = -1;
  int exit_status_ = -1;
};

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Processes whose parent is `pid` (from /proc).
std::vector<pid_t> ChildrenOf(pid_t pid) {
  std::vector<pid_t> children;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream status(entry.path() / "status");
    std::string line;
    while (std::getline(status, line)) {
      if (line.rfind("PPid:", 0) == 0) {
        if (std::stol(line.substr(5)) == pid) children.push_back(std::stoi(name));
        break;
      }
    }
  }
  return children;
}

// Runs `argv` and returns what it printed (stdout and stderr).
std::string Output(std::vector<std::string> argv) {
  static int counter = 0;
  const std::string log =
      absl::StrCat(std::getenv("TEST_TMPDIR"), "/output", counter++, ".txt");
  Child child(std::move(argv), log);
  EXPECT_NE(child.Wait(kEventDeadline), -1) << "did not exit";
  return ReadFile(log);
}

// A coordinator with --expect_workers=2 and two worker processes started
// apart from it (pinned to ranks 0 and 1), each with `worker_flags`.
class RemoteCluster {
 public:
  explicit RemoteCluster(const std::vector<std::string>& flags,
                         std::vector<std::string> worker_flags = {"--collective_timeout_s=10"})
      : worker_flags_(std::move(worker_flags)) {
    const std::string address_file =
        absl::StrCat(std::getenv("TEST_TMPDIR"), "/remote", counter_++, ".addr");
    std::vector<std::string> argv = {
        Runfile("coordinator/main"), "--listen=127.0.0.1:0", "--expect_workers=2",
        "--model_dir=" + Runfile("models/random/tiny"),
        "--eplb=false", "--http_listen=off",
        "--model_cache_dir=" + std::string(std::getenv("TEST_TMPDIR")) + "/models",
        "--address_file=" + address_file};
    argv.insert(argv.end(), flags.begin(), flags.end());
    coordinator_ = std::make_unique<Child>(argv);
    const absl::Time until = absl::Now() + kEventDeadline;
    while (address_.empty() && absl::Now() < until) {
      std::ifstream(address_file) >> address_;
      if (address_.empty()) absl::SleepFor(absl::Milliseconds(20));
    }
    EXPECT_FALSE(address_.empty()) << "no --address_file written";
    id_ = counter_ - 1;
    for (int r = 0; r < 2; ++r) StartWorker(r);
    stub_ = v1::Inference::NewStub(MakeChannel(address_));
    EXPECT_TRUE(WaitFor([&] { return Health() == "SERVING"; })) << "not SERVING";
  }
  ~RemoteCluster() {
    const int status = coordinator_->Stop(kEventDeadline);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "coordinator status " << status;
  }

  // Starts a worker that asks for `rank`; returns the handle of the one
  // started for it before (null the first time). Its log goes to
  // WorkerLog(rank, n), n counting the workers started for the rank.
  std::unique_ptr<Child> StartWorker(int rank) {
    std::unique_ptr<Child> previous = std::move(workers_[rank]);
    workers_[rank] = NewWorker(absl::StrCat("--rank=", rank), WorkerLog(rank, started_[rank]++));
    return previous;
  }
  // A worker that asks for any rank (--rank=-1), logging to `log`.
  std::unique_ptr<Child> NewWorker(const std::string& rank_flag, const std::string& log,
                                   std::vector<std::string> more_flags = {}) {
    std::vector<std::string> argv = {Runfile("worker/main"), "--coordinator=" + address_,
                                     "--listen=127.0.0.1:0", rank_flag};
    argv.insert(argv.end(), worker_flags_.begin(), worker_flags_.end());
    argv.insert(argv.end(), more_flags.begin(), more_flags.end());
    return std::make_unique<Child>(argv, log);
  }
  std::string WorkerLog(int rank, int n) const {
    return absl::StrCat(std::getenv("TEST_TMPDIR"), "/cluster", id_, "_rank", rank, "_", n,
                        ".log");
  }
  Child& worker(int rank) { return *workers_[rank]; }
  v1::Inference::Stub& stub() { return *stub_; }
  const std::string& address() const { return address_; }

  std::string Health() {
    absl::StatusOr<std::string> health =
        CheckHealth(*MakeChannel(address_), "weir.v1.Inference", std::chrono::seconds(5));
    return health.ok() ? *health : health.status().ToString();
  }
  v1::ServerState State() {
    v1::ServerState state;
    grpc::ClientContext context;
    context.set_deadline(DeadlineIn(std::chrono::seconds(10)));
    stub_->GetServerState(&context, v1::GetServerStateRequest(), &state);
    return state;
  }
  v1::PlacementInfo Placement() {
    auto stub = v1::Coordinator::NewStub(MakeChannel(address_));
    v1::PlacementInfo info;
    grpc::ClientContext context;
    context.set_deadline(DeadlineIn(std::chrono::seconds(10)));
    EXPECT_TRUE(stub->GetPlacement(&context, v1::GetPlacementRequest(), &info).ok());
    return info;
  }
  // Polls `done` every 50 ms until it holds or kEventDeadline passes.
  static bool WaitFor(const std::function<bool()>& done) {
    const absl::Time until = absl::Now() + kEventDeadline;
    while (absl::Now() < until) {
      if (done()) return true;
      absl::SleepFor(absl::Milliseconds(50));
    }
    return false;
  }

 private:
  static inline int counter_ = 0;
  int id_ = 0;
  const std::vector<std::string> worker_flags_;
  std::unique_ptr<Child> coordinator_;
  std::string address_;
  std::unique_ptr<Child> workers_[2];
  int started_[2] = {0, 0};
  std::unique_ptr<v1::Inference::Stub> stub_;
};

using Outcome = testing_util::StreamOutcome;

v1::GenerateRequest MakeRequest(int i) { return testing_util::MixedRequest(i, kTokens); }

Outcome RunOne(v1::Inference::Stub& stub, const v1::GenerateRequest& request) {
  return testing_util::RunStream(stub, request, 300);
}

// Runs the kRequests requests at once; `during` runs meanwhile.
std::vector<Outcome> RunAll(RemoteCluster& cluster, const std::function<void()>& during = {}) {
  std::vector<Outcome> outs(kRequests);
  std::vector<std::thread> threads;
  for (int i = 0; i < kRequests; ++i) {
    threads.emplace_back([&, i] { outs[i] = RunOne(cluster.stub(), MakeRequest(i)); });
  }
  if (during) during();
  for (std::thread& t : threads) t.join();
  return outs;
}

// The undisturbed outputs, from a remote cluster of their own (once).
const std::vector<Outcome>& Want() {
  static const std::vector<Outcome>* want = [] {
    RemoteCluster undisturbed({});
    return new std::vector<Outcome>(RunAll(undisturbed));
  }();
  return *want;
}

// Waits until the step loop has run `after` steps past `before` (mid-generation).
bool WaitSteps(RemoteCluster& cluster, uint64_t before, uint64_t after) {
  return RemoteCluster::WaitFor([&] { return cluster.State().steps() >= before + after; });
}

// True once GetServerState lists no worker for `rank` (the recovery freed it).
bool RankFreed(RemoteCluster& cluster, int rank) {
  const v1::ServerState state = cluster.State();
  for (const v1::ServerState::Worker& w : state.workers()) {
    if (static_cast<int>(w.rank()) == rank) return false;
  }
  return true;
}

void ExpectOutcomesEqual(const std::vector<Outcome>& got, const std::vector<Outcome>& want) {
  for (int i = 0; i < kRequests; ++i) {
    EXPECT_TRUE(got[i].status.ok()) << i << ": " << got[i].status.error_message();
    EXPECT_EQ(got[i].tokens, want[i].tokens) << "request " << i;
  }
}

// The ranks GetServerState lists as waiting for a rejoin.
std::vector<v1::ServerState::WaitingRank> Waiting(RemoteCluster& cluster) {
  const v1::ServerState state = cluster.State();
  return {state.waiting_ranks().begin(), state.waiting_ranks().end()};
}

TEST(RejoinTest, KilledRemoteWorkerRejoinsAndNoRequestIsLost) {
  const std::vector<Outcome>& want = Want();
  for (int i = 0; i < kRequests; ++i) {
    ASSERT_TRUE(want[i].status.ok()) << i << ": " << want[i].status.error_message();
    ASSERT_EQ(want[i].tokens.size(), kTokens) << i;
  }
  RemoteCluster cluster({"--rejoin_timeout_s=120"});
  EXPECT_EQ(cluster.State().recoveries().group_epoch(), 1u);
  EXPECT_TRUE(Waiting(cluster).empty());
  const std::string lost_address = cluster.Placement().workers(1).address();
  const uint64_t before = cluster.State().steps();
  bool killed = false;
  std::vector<v1::ServerState::WaitingRank> waiting;
  std::string info;
  std::unique_ptr<Child> restarted;
  std::vector<Outcome> got = RunAll(cluster, [&] {
    ASSERT_TRUE(WaitSteps(cluster, before, 20));
    killed = cluster.worker(1).Signal(SIGKILL);
    // The coordinator cannot restart a remote worker: it frees the rank and
    // waits, and says so. The operator restarts it without --rank.
    ASSERT_TRUE(RemoteCluster::WaitFor([&] { return !(waiting = Waiting(cluster)).empty(); }))
        << "rank 1 was not listed as waiting for a rejoin";
    ASSERT_TRUE(RankFreed(cluster, 1));
    info = Output({Runfile("tools/weir"), "info", "--server=" + cluster.address()});
    restarted = cluster.NewWorker("--rank=-1", cluster.WorkerLog(1, 1));
  });
  ASSERT_TRUE(killed);
  ASSERT_EQ(waiting.size(), 1u);
  EXPECT_EQ(waiting[0].rank(), 1u);
  EXPECT_EQ(waiting[0].previous_address(), lost_address);
  // The wait is --rejoin_timeout_s long and began at most a minute ago.
  const int64_t since = waiting[0].since().seconds(), deadline = waiting[0].deadline().seconds();
  EXPECT_GE(deadline - since, 119);
  EXPECT_LE(deadline - since, 121);
  EXPECT_LE(since, absl::ToUnixSeconds(absl::Now()));
  EXPECT_GE(since, absl::ToUnixSeconds(absl::Now()) - 600);
  EXPECT_NE(info.find("rank 1   WAITING for a worker to rejoin"), std::string::npos) << info;
  EXPECT_NE(info.find("was " + lost_address), std::string::npos) << info;
  ExpectOutcomesEqual(got, want);
  const v1::ServerState state = cluster.State();
  EXPECT_EQ(state.lifecycle(), v1::LIFECYCLE_READY);
  EXPECT_EQ(state.waiting_ranks_size(), 0);
  EXPECT_EQ(state.recoveries().count(), 1u);
  EXPECT_EQ(state.recoveries().group_epoch(), 2u);
  EXPECT_FALSE(state.recoveries().last_cause().empty());
  EXPECT_GT(state.recoveries().last_seconds(), 0.0);
  EXPECT_GE(state.recoveries().last_detect_to_serving_s(), state.recoveries().last_seconds());
  ASSERT_EQ(state.workers_size(), 2);
  ASSERT_NE(restarted, nullptr);
  EXPECT_EQ(state.workers(1).pid(), restarted->pid());  // the unpinned worker took rank 1
  // New work runs on the rejoined group.
  Outcome again = RunOne(cluster.stub(), MakeRequest(0));
  EXPECT_TRUE(again.status.ok()) << again.status.error_message();
  EXPECT_EQ(again.tokens, want[0].tokens);
}

// A spare started without --rank while both ranks are held is told to
// retry (not refused for good) and takes rank 1 once its worker is lost.
TEST(RejoinTest, SpareWorkerTakesTheRankOfALostOne) {
  const std::vector<Outcome>& want = Want();
  RemoteCluster cluster({"--rejoin_timeout_s=120"});
  const std::string spare_log = cluster.WorkerLog(9, 0);
  std::unique_ptr<Child> spare =
      cluster.NewWorker("--rank=-1", spare_log, {"--register_timeout_s=600"});
  // It asked and was told to retry: every rank is held.
  ASSERT_TRUE(RemoteCluster::WaitFor([&] {
    return ReadFile(spare_log).find("not accepted yet") != std::string::npos;
  })) << ReadFile(spare_log);
  EXPECT_NE(ReadFile(spare_log).find("ranks are held"), std::string::npos) << ReadFile(spare_log);
  EXPECT_TRUE(spare->Running());
  const uint64_t before = cluster.State().steps();
  bool killed = false;
  std::vector<Outcome> got = RunAll(cluster, [&] {
    ASSERT_TRUE(WaitSteps(cluster, before, 20));
    killed = cluster.worker(1).Signal(SIGKILL);
  });
  ASSERT_TRUE(killed);
  ExpectOutcomesEqual(got, want);
  const v1::ServerState state = cluster.State();
  EXPECT_EQ(state.lifecycle(), v1::LIFECYCLE_READY);
  EXPECT_EQ(state.recoveries().count(), 1u);
  ASSERT_EQ(state.workers_size(), 2);
  EXPECT_EQ(state.workers(1).pid(), spare->pid());
}

TEST(RejoinTest, RemoteWorkerThatNeverReturnsLeavesTheServerNotServing) {
  RemoteCluster cluster({"--rejoin_timeout_s=3"});
  const uint64_t before = cluster.State().steps();
  bool killed = false;
  std::vector<Outcome> got = RunAll(cluster, [&] {
    ASSERT_TRUE(WaitSteps(cluster, before, 20));
    killed = cluster.worker(1).Signal(SIGKILL);
  });
  ASSERT_TRUE(killed);
  for (int i = 0; i < kRequests; ++i) {
    // UNAVAILABLE, or ABORTED ("failed after N tokens") once tokens went out.
    EXPECT_TRUE(got[i].status.error_code() == grpc::StatusCode::UNAVAILABLE ||
                got[i].status.error_code() == grpc::StatusCode::ABORTED)
        << i << ": " << got[i].status.error_code() << " " << got[i].status.error_message();
    EXPECT_NE(got[i].status.error_message().find("recovery failed"), std::string::npos)
        << i << ": " << got[i].status.error_message();
  }
  // The step loop stops for good once the rejoin wait is over.
  EXPECT_TRUE(RemoteCluster::WaitFor([&] { return !cluster.State().failure().empty(); }));
  EXPECT_EQ(cluster.Health(), "NOT_SERVING");
  const v1::ServerState state = cluster.State();
  EXPECT_NE(state.failure().find("no worker registered for rank(s) 1"), std::string::npos)
      << state.failure();
  EXPECT_NE(state.failure().find("--rejoin_timeout_s"), std::string::npos) << state.failure();
  EXPECT_EQ(state.recoveries().count(), 0u);
  const Outcome late = RunOne(cluster.stub(), MakeRequest(0));
  EXPECT_EQ(late.status.error_code(), grpc::StatusCode::UNAVAILABLE)
      << late.status.error_message();
}

// Opens a Steps stream to `address`, sends one plan of `group_epoch`, and
// returns how the stream ended.
grpc::Status SendPlan(const std::string& address, uint64_t coordinator_epoch,
                      uint64_t group_epoch) {
  auto stub = v1::Worker::NewStub(MakeChannel(address));
  grpc::ClientContext context;
  context.set_deadline(DeadlineIn(std::chrono::seconds(30)));
  auto stream = stub->Steps(&context);
  v1::StepPlan plan;
  plan.set_coordinator_epoch(coordinator_epoch);
  plan.set_group_epoch(group_epoch);
  plan.set_step_id(0);
  plan.set_type(v1::STEP_TYPE_DECODE);
  stream->Write(plan);
  stream->WritesDone();
  v1::StepResult result;
  while (stream->Read(&result)) {
  }
  return stream->Finish();
}

// The workers wait up to 10 minutes for a peer in a collective: the
// survivor's step, stuck with the stopped peer, must be aborted by the new
// group's Init (else that Init outlasts the coordinator's 90 s and the
// recovery fails), and the stopped worker, woken, must find out that it was
// replaced and exit by itself, aborting its own stuck step.
TEST(RejoinTest, StoppedWorkerOfTheOldEpochExitsWhenItWakes) {
  const std::vector<Outcome>& want = Want();
  RemoteCluster cluster({"--rejoin_timeout_s=120", "--health_interval_ms=200",
                         "--step_timeout_s=30"},
                        {"--collective_timeout_s=600"});
  const v1::PlacementInfo old_placement = cluster.Placement();
  ASSERT_EQ(old_placement.group_epoch(), 1u);
  ASSERT_EQ(old_placement.workers_size(), 2);
  const std::string survivor = old_placement.workers(0).address();
  const std::string stale = old_placement.workers(1).address();
  const uint64_t before = cluster.State().steps();
  bool stopped = false, freed = false;
  std::unique_ptr<Child> old_worker;
  std::vector<Outcome> got = RunAll(cluster, [&] {
    ASSERT_TRUE(WaitSteps(cluster, before, 20));
    stopped = cluster.worker(1).Signal(SIGSTOP);
    // The health checks find it silent; the recovery frees its rank.
    freed = RemoteCluster::WaitFor([&] { return RankFreed(cluster, 1); });
    old_worker = cluster.StartWorker(1);  // its replacement; the stopped one sleeps on
  });
  ASSERT_TRUE(stopped);
  ASSERT_TRUE(freed);
  ExpectOutcomesEqual(got, want);
  const v1::PlacementInfo placement = cluster.Placement();
  EXPECT_EQ(placement.group_epoch(), 2u);
  ASSERT_EQ(placement.workers_size(), 2);
  EXPECT_EQ(placement.workers(0).address(), survivor);
  EXPECT_NE(placement.workers(1).address(), stale);

  const v1::ServerState after = cluster.State();
  for (const v1::ServerState::Worker& w : after.workers()) {
    EXPECT_EQ(w.state(), v1::WORKER_STATE_READY) << w.rank();
  }
  // The old rank 1 wakes up, still of group epoch 1, finds its rank held by
  // its replacement, and exits: code 3, the reason in its log, no process
  // left behind.
  ASSERT_NE(old_worker, nullptr);
  const pid_t old_pid = old_worker->pid();
  ASSERT_TRUE(old_worker->Signal(SIGCONT));
  const int status = old_worker->Wait(kEventDeadline);
  ASSERT_NE(status, -1) << "the replaced worker did not exit";
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 3) << "wait status " << status;
  const std::string log = ReadFile(cluster.WorkerLog(1, 0));
  EXPECT_NE(log.find("superseded: rank 1 is now held by the worker at " +
                     placement.workers(1).address()),
            std::string::npos)
      << log;
  EXPECT_TRUE(ChildrenOf(old_pid).empty());
  EXPECT_EQ(SendPlan(stale, placement.coordinator_epoch(), placement.group_epoch()).error_code(),
            grpc::StatusCode::UNAVAILABLE);  // nobody listens there any more
  // The survivor refuses a stream of the old epoch (as a late plan of the
  // old group would be), naming both epochs; its own stream goes on.
  const grpc::Status old_to_survivor =
      SendPlan(survivor, placement.coordinator_epoch(), old_placement.group_epoch());
  EXPECT_EQ(old_to_survivor.error_code(), grpc::StatusCode::FAILED_PRECONDITION)
      << old_to_survivor.error_message();
  EXPECT_NE(old_to_survivor.error_message().find("group epoch 1"), std::string::npos)
      << old_to_survivor.error_message();
  EXPECT_NE(old_to_survivor.error_message().find("group epoch 2"), std::string::npos)
      << old_to_survivor.error_message();
  // So does an Init of the old epoch (an old bring-up arriving late).
  {
    auto stub = v1::Worker::NewStub(MakeChannel(survivor));
    grpc::ClientContext context;
    context.set_deadline(DeadlineIn(std::chrono::seconds(30)));
    v1::InitRequest init;
    init.set_coordinator_epoch(placement.coordinator_epoch());
    init.set_group_epoch(1);
    init.set_rank(0);
    v1::InitResponse response;
    const grpc::Status status = stub->Init(&context, init, &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION)
        << status.error_message();
    EXPECT_NE(status.error_message().find("fenced"), std::string::npos) << status.error_message();
  }
  // No request is affected: the same outputs again, no further recovery.
  ExpectOutcomesEqual(RunAll(cluster), want);
  const v1::ServerState state = cluster.State();
  EXPECT_EQ(state.lifecycle(), v1::LIFECYCLE_READY);
  EXPECT_EQ(state.recoveries().count(), 1u);
  EXPECT_EQ(state.recoveries().group_epoch(), 2u);
}

}  // namespace
}  // namespace weir
