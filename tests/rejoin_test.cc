// tests/rejoin_test.cc
//
// Remote workers and the group epoch (tiny model on CPU, 2 workers started
// apart from the coordinator, --expect_workers=2, as on several machines):
//
// * a worker killed mid-generation is restarted by hand (as an operator or
//   a supervisor would): the coordinator waits for it to register, brings
//   the group up at a new group epoch (the survivor re-initialises its
//   communicators), and every request in flight ends with the tokens of an
//   undisturbed run;
// * a worker that never comes back: past --rejoin_timeout_s the server is
//   NOT_SERVING, new requests are UNAVAILABLE and GetServerState says why;
// * a stopped worker (SIGSTOP) is replaced while it sleeps; woken up
//   (SIGCONT), the old-epoch worker cannot act on the new group: its steps
//   and the survivor's steps of the old epoch are refused naming both
//   epochs, and no request is affected.

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
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

// A child process, SIGKILLed and reaped at destruction unless reaped before.
class Child {
 public:
  explicit Child(std::vector<std::string> argv) {
    std::vector<char*> args;
    for (std::string& a : argv) args.push_back(a.data());
    args.push_back(nullptr);
    pid_ = fork();
    if (pid_ == 0) {
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
    const absl::Time until = absl::Now() + timeout;
    while (absl::Now() < until) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return status;
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
    return -1;
  }

 private:
  pid_t pid_ = -1;
};

// A coordinator with --expect_workers=2 and two worker processes started
// apart from it (pinned to ranks 0 and 1).
class RemoteCluster {
 public:
  explicit RemoteCluster(const std::vector<std::string>& flags) {
    const std::string address_file =
        absl::StrCat(std::getenv("TEST_TMPDIR"), "/remote", counter_++, ".addr");
    std::vector<std::string> argv = {
        Runfile("coordinator/main"), "--listen=127.0.0.1:0", "--expect_workers=2",
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
    for (int r = 0; r < 2; ++r) StartWorker(r);
    stub_ = v1::Inference::NewStub(MakeChannel(address_));
    EXPECT_TRUE(WaitFor([&] { return Health() == "SERVING"; })) << "not SERVING";
  }
  ~RemoteCluster() {
    const int status = coordinator_->Stop(kEventDeadline);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "coordinator status " << status;
  }

  // Starts a worker that asks for `rank`; returns the handle of the one
  // started for it before (null the first time).
  std::unique_ptr<Child> StartWorker(int rank) {
    std::unique_ptr<Child> previous = std::move(workers_[rank]);
    workers_[rank] = std::make_unique<Child>(std::vector<std::string>{
        Runfile("worker/main"), "--coordinator=" + address_, "--listen=127.0.0.1:0",
        absl::StrCat("--rank=", rank), "--collective_timeout_s=10"});
    return previous;
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
  std::unique_ptr<Child> coordinator_;
  std::string address_;
  std::unique_ptr<Child> workers_[2];
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

TEST(RejoinTest, KilledRemoteWorkerRejoinsAndNoRequestIsLost) {
  const std::vector<Outcome>& want = Want();
  for (int i = 0; i < kRequests; ++i) {
    ASSERT_TRUE(want[i].status.ok()) << i << ": " << want[i].status.error_message();
    ASSERT_EQ(want[i].tokens.size(), kTokens) << i;
  }
  RemoteCluster cluster({"--rejoin_timeout_s=120"});
  EXPECT_EQ(cluster.State().recoveries().group_epoch(), 1u);
  const uint64_t before = cluster.State().steps();
  bool killed = false, freed = false;
  std::unique_ptr<Child> dead;
  std::vector<Outcome> got = RunAll(cluster, [&] {
    ASSERT_TRUE(WaitSteps(cluster, before, 20));
    killed = cluster.worker(1).Signal(SIGKILL);
    // The coordinator cannot restart a remote worker: it frees the rank and
    // waits. The operator restarts it a moment later.
    freed = RemoteCluster::WaitFor([&] { return RankFreed(cluster, 1); });
    absl::SleepFor(absl::Seconds(1));
    dead = cluster.StartWorker(1);
  });
  ASSERT_TRUE(killed);
  ASSERT_TRUE(freed) << "rank 1 was not freed for a rejoin";
  ExpectOutcomesEqual(got, want);
  const v1::ServerState state = cluster.State();
  EXPECT_EQ(state.lifecycle(), v1::LIFECYCLE_READY);
  EXPECT_EQ(state.recoveries().count(), 1u);
  EXPECT_EQ(state.recoveries().group_epoch(), 2u);
  EXPECT_FALSE(state.recoveries().last_cause().empty());
  EXPECT_GT(state.recoveries().last_seconds(), 0.0);
  EXPECT_GE(state.recoveries().last_detect_to_serving_s(), state.recoveries().last_seconds());
  ASSERT_EQ(state.workers_size(), 2);
  EXPECT_EQ(state.workers(1).pid(), cluster.worker(1).pid());
  // New work runs on the rejoined group.
  Outcome again = RunOne(cluster.stub(), MakeRequest(0));
  EXPECT_TRUE(again.status.ok()) << again.status.error_message();
  EXPECT_EQ(again.tokens, want[0].tokens);
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

TEST(RejoinTest, StoppedWorkerOfTheOldEpochIsFencedWhenItWakes) {
  const std::vector<Outcome>& want = Want();
  RemoteCluster cluster({"--rejoin_timeout_s=120", "--health_interval_ms=200",
                         "--step_timeout_s=30"});
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
  // The old rank 1 wakes up, still of group epoch 1. Its steps of the new
  // epoch are refused: it was never initialised for it.
  ASSERT_NE(old_worker, nullptr);
  ASSERT_TRUE(old_worker->Signal(SIGCONT));
  const grpc::Status to_stale =
      SendPlan(stale, placement.coordinator_epoch(), placement.group_epoch());
  EXPECT_EQ(to_stale.error_code(), grpc::StatusCode::FAILED_PRECONDITION)
      << to_stale.error_message();
  EXPECT_NE(to_stale.error_message().find("group epoch 2"), std::string::npos)
      << to_stale.error_message();
  EXPECT_NE(to_stale.error_message().find("group epoch 1"), std::string::npos)
      << to_stale.error_message();
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
