// tests/recovery_test.cc
//
// A worker's death costs no request (local cluster, tiny model on CPU, 2
// workers = DP 2 x EP 2): 8 concurrent requests (greedy and seeded
// sampling) run once undisturbed and once with `kill -9` of worker rank 1
// mid-generation. The coordinator replaces the worker group and resumes
// every request from the tokens it already delivered: every output equals
// the undisturbed run's, token for token, and the server serves afterwards.

#include <signal.h>

#include <atomic>
#include <cstdio>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/grpc_util.h"
#include "gtest/gtest.h"
#include "tests/local_cluster.h"

namespace weir {
namespace {

using testing_util::Cluster;

constexpr int kRequests = 8;
constexpr uint32_t kTokens = 160;

using Outcome = testing_util::StreamOutcome;

std::vector<Outcome> RunAll(Cluster& cluster, const std::function<void()>& during = {},
                            int n = kRequests, uint32_t tokens = kTokens,
                            bool constrained = false) {
  std::vector<Outcome> outs(n);
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i) {
    threads.emplace_back(
        [&, i] {
          outs[i] = testing_util::RunStream(
              cluster.stub(), testing_util::MixedRequest(i, tokens, constrained), 240);
        });
  }
  if (during) during();
  for (std::thread& t : threads) t.join();
  return outs;
}

// Once the loop has run `after` steps past `steps_before` (mid-generation;
// at most 60 s), sends `signo` to worker `rank`. True if it was sent.
bool SignalAfterSteps(Cluster& cluster, int64_t steps_before, int64_t after, int rank,
                      int signo) {
  const absl::Time until = absl::Now() + absl::Seconds(60);
  while (cluster.Steps() < steps_before + after && absl::Now() < until) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  const pid_t victim = cluster.ChildPid(absl::StrCat("--rank=", rank));
  return victim > 0 && kill(victim, signo) == 0;
}

TEST(RecoveryTest, KilledWorkerCostsNoRequest) {
  const std::vector<std::string> flags = {"--workers=2", "--eplb=false"};
  std::vector<Outcome> want;
  {
    Cluster undisturbed(flags);
    want = RunAll(undisturbed);
  }
  for (int i = 0; i < kRequests; ++i) {
    ASSERT_TRUE(want[i].status.ok()) << i << ": " << want[i].status.error_message();
    ASSERT_EQ(want[i].tokens.size(), kTokens) << i;
  }

  Cluster cluster(flags);
  const int64_t steps_before = cluster.Steps();
  bool killed = false;
  std::vector<Outcome> got = RunAll(
      cluster, [&] { killed = SignalAfterSteps(cluster, steps_before, 20, 1, SIGKILL); });
  ASSERT_TRUE(killed);
  for (int i = 0; i < kRequests; ++i) {
    EXPECT_TRUE(got[i].status.ok()) << i << ": " << got[i].status.error_message();
    EXPECT_EQ(got[i].tokens, want[i].tokens) << "request " << i;
  }
  // The replacement group serves new work.
  std::vector<uint32_t> tokens;
  ASSERT_TRUE(cluster.Greedy({7, 8, 9}, 12, tokens).ok());
  EXPECT_EQ(tokens.size(), 12u);
  // GetServerState says so.
  v1::ServerState state;
  ASSERT_TRUE(cluster.State(state).ok());
  EXPECT_EQ(state.recoveries().count(), 1u);
  EXPECT_FALSE(state.recoveries().last_cause().empty());
  EXPECT_GT(state.recoveries().last_seconds(), 0.0);
  EXPECT_EQ(state.lifecycle(), v1::LIFECYCLE_READY);
}

// A stopped worker (SIGSTOP: alive, silent) is caught by the step deadline
// or the health checks, and replaced the same way.
TEST(RecoveryTest, StoppedWorkerCostsNoRequest) {
  const std::vector<std::string> flags = {"--workers=2", "--eplb=false"};
  std::vector<Outcome> want;
  {
    Cluster undisturbed(flags);
    want = RunAll(undisturbed);
  }
  Cluster cluster({"--workers=2", "--eplb=false", "--step_timeout_s=2"});
  const int64_t steps_before = cluster.Steps();
  bool stopped = false;
  std::vector<Outcome> got = RunAll(
      cluster, [&] { stopped = SignalAfterSteps(cluster, steps_before, 20, 0, SIGSTOP); });
  ASSERT_TRUE(stopped);
  for (int i = 0; i < kRequests; ++i) {
    EXPECT_TRUE(got[i].status.ok()) << i << ": " << got[i].status.error_message();
    EXPECT_EQ(got[i].tokens, want[i].tokens) << "request " << i;
  }
}

// A worker that dies while nothing runs: the liveness monitor sees it and
// the group is replaced before any request needs it (health SERVING again).
TEST(RecoveryTest, IdleDeathIsRepairedWithoutTraffic) {
  Cluster cluster({"--workers=2", "--eplb=false", "--health_interval_ms=100"});
  const pid_t victim = cluster.ChildPid("--rank=1");
  ASSERT_GT(victim, 0);
  ASSERT_EQ(kill(victim, SIGKILL), 0);
  const absl::Time until = absl::Now() + absl::Seconds(30);
  bool replaced = false;
  while (!replaced && absl::Now() < until) {
    absl::SleepFor(absl::Milliseconds(50));
    const pid_t now = cluster.ChildPid("--rank=1");
    v1::ServerState state;
    if (now > 0 && now != victim && cluster.State(state).ok()) {
      replaced = state.lifecycle() == v1::LIFECYCLE_READY;
    }
  }
  ASSERT_TRUE(replaced) << "no replacement group within 30 s";
  std::vector<uint32_t> tokens;
  ASSERT_TRUE(cluster.Greedy({7, 8, 9}, 12, tokens).ok());
  EXPECT_EQ(tokens.size(), 12u);
}

// No recovery allowed (--max_recoveries=0): the requests fail, the server
// reports why (ServerState.failure) and health says NOT_SERVING.
TEST(RecoveryTest, WithoutRecoveryTheFailureIsReported) {
  Cluster cluster({"--workers=2", "--eplb=false", "--max_recoveries=0"});
  const int64_t steps_before = cluster.Steps();
  bool killed = false;
  std::vector<Outcome> got = RunAll(
      cluster, [&] { killed = SignalAfterSteps(cluster, steps_before, 20, 1, SIGKILL); });
  ASSERT_TRUE(killed);
  int failed = 0;
  for (const Outcome& o : got) failed += !o.status.ok();
  EXPECT_EQ(failed, kRequests);
  // The step loop records why before it fails a request, so the cause is
  // there as soon as the requests have failed.
  v1::ServerState state;
  ASSERT_TRUE(cluster.State(state).ok());
  EXPECT_NE(state.failure().find("worker rank"), std::string::npos) << state.failure();
  EXPECT_EQ(state.recoveries().count(), 0u);
  auto channel = MakeChannel(cluster.address());
  absl::StatusOr<std::string> health =
      CheckHealth(*channel, "weir.v1.Inference", std::chrono::seconds(5));
  ASSERT_TRUE(health.ok()) << health.status();
  EXPECT_EQ(*health, "NOT_SERVING");
}

// Chaos (DP 4 x EP 4): 64 concurrent requests (greedy, seeded, regex
// constrained) per round, 10 rounds on one cluster, each losing a random
// rank at a random step: SIGKILL (rounds 0, 3, 6, 9), SIGSTOP (1, 4, 7; the
// health checks catch it) or a worker that stops answering its Steps stream
// while its process and health stay up (2, 5, 8: SIGUSR1 with the workers'
// --fault_injection; only the step deadline catches it). Every round's
// outputs equal the undisturbed run's; the cluster recovers every round.
TEST(RecoveryTest, ChaosRoundsOnFourRanks) {
  constexpr int kChaosRequests = 64, kRounds = 10;
  constexpr uint32_t kChaosTokens = 64;
  // The health checks catch a stopped worker in ~1.5 s; the step deadline
  // (what catches a stall) stays generous so that a recompute prefill on a
  // loaded 2-core CI machine does not count as a hang.
  const std::vector<std::string> flags = {"--workers=4", "--eplb=false", "--step_timeout_s=10",
                                          "--max_recoveries=30",
                                          "--worker_flags=--fault_injection"};
  std::vector<Outcome> want;
  {
    Cluster undisturbed(flags);
    want = RunAll(undisturbed, {}, kChaosRequests, kChaosTokens, /*constrained=*/true);
  }
  for (int i = 0; i < kChaosRequests; ++i) {
    ASSERT_TRUE(want[i].status.ok()) << i << ": " << want[i].status.error_message();
    ASSERT_FALSE(want[i].tokens.empty()) << i;
  }
  Cluster cluster(flags);
  std::mt19937 rng(20261201);
  for (int round = 0; round < kRounds; ++round) {
    const int victim_rank = static_cast<int>(rng() % 4);
    const int64_t after_steps = 5 + static_cast<int64_t>(rng() % 40);
    const int signo = round % 3 == 0 ? SIGKILL : round % 3 == 1 ? SIGSTOP : SIGUSR1;
    const int64_t steps_before = cluster.Steps();
    bool signalled = false;
    std::vector<Outcome> got = RunAll(
        cluster,
        [&] {
          signalled = SignalAfterSteps(cluster, steps_before, after_steps, victim_rank, signo);
        },
        kChaosRequests, kChaosTokens, /*constrained=*/true);
    ASSERT_TRUE(signalled) << "round " << round;
    int lost = 0, differ = 0;
    for (int i = 0; i < kChaosRequests; ++i) {
      lost += !got[i].status.ok();
      differ += got[i].status.ok() && got[i].tokens != want[i].tokens;
      EXPECT_TRUE(got[i].status.ok())
          << "round " << round << " request " << i << ": " << got[i].status.error_message();
      EXPECT_EQ(got[i].tokens, want[i].tokens) << "round " << round << " request " << i;
    }
    std::printf("round %d: rank %d %s after %lld steps: %d of %d requests lost, %d differ\n",
                round, victim_rank,
                signo == SIGKILL   ? "SIGKILL"
                : signo == SIGSTOP ? "SIGSTOP"
                                   : "stalled stream",
                static_cast<long long>(after_steps), lost, kChaosRequests, differ);
  }
  v1::ServerState state;
  ASSERT_TRUE(cluster.State(state).ok());
  // One per round; a loaded machine may add a spurious one (a health check
  // or the deadline missed), which costs time but no request.
  EXPECT_GE(state.recoveries().count(), static_cast<uint64_t>(kRounds));
  EXPECT_LE(state.recoveries().count(), static_cast<uint64_t>(kRounds + 3));
  std::printf("recoveries %llu, last %.2f s after: %s\n",
              static_cast<unsigned long long>(state.recoveries().count()),
              state.recoveries().last_seconds(), state.recoveries().last_cause().c_str());
}

}  // namespace
}  // namespace weir
