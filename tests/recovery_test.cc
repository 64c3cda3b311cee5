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
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "base/grpc_util.h"
#include "gtest/gtest.h"
#include "tests/local_cluster.h"

namespace weir {
namespace {

using testing_util::Cluster;

constexpr int kRequests = 8;
constexpr uint32_t kTokens = 160;

v1::GenerateRequest MakeRequest(int i) {
  v1::GenerateRequest request;
  for (int t = 0; t < 3 + i; ++t) request.mutable_tokens()->add_ids(5 + 13 * i + t);
  request.mutable_stop()->set_max_new_tokens(kTokens);
  request.mutable_stop()->set_ignore_eos(true);
  if (i % 4 == 3) {  // seeded sampling: the draw depends on the position, not the batch
    request.mutable_sampling()->set_temperature(0.9f);
    request.mutable_sampling()->set_seed(1000 + i);
  } else {
    request.mutable_sampling()->set_temperature(0.0f);
  }
  return request;
}

struct Outcome {
  grpc::Status status;
  std::vector<uint32_t> tokens;
};

Outcome Run(Cluster& cluster, int i) {
  Outcome out;
  grpc::ClientContext context;
  context.set_deadline(DeadlineIn(std::chrono::seconds(180)));
  auto reader = cluster.stub().Generate(&context, MakeRequest(i));
  v1::GenerateEvent event;
  while (reader->Read(&event)) {
    if (event.has_final()) {
      out.tokens.assign(event.final().full_token_ids().begin(),
                        event.final().full_token_ids().end());
    }
  }
  out.status = reader->Finish();
  return out;
}

std::vector<Outcome> RunAll(Cluster& cluster, const std::function<void()>& during = {}) {
  std::vector<Outcome> outs(kRequests);
  std::vector<std::thread> threads;
  for (int i = 0; i < kRequests; ++i) threads.emplace_back([&, i] { outs[i] = Run(cluster, i); });
  if (during) during();
  for (std::thread& t : threads) t.join();
  return outs;
}

int64_t Steps(Cluster& cluster) {
  grpc::ClientContext context;
  context.set_deadline(DeadlineIn(std::chrono::seconds(10)));
  v1::ServerState state;
  if (!cluster.stub().GetServerState(&context, v1::GetServerStateRequest(), &state).ok()) {
    return -1;
  }
  return static_cast<int64_t>(state.steps());
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
  const int64_t steps_before = Steps(cluster);
  bool killed = false;
  std::vector<Outcome> got = RunAll(cluster, [&] {
    // Mid-generation: some steps done, far from the end.
    const absl::Time until = absl::Now() + absl::Seconds(60);
    while (Steps(cluster) < steps_before + 20 && absl::Now() < until) {
      absl::SleepFor(absl::Milliseconds(5));
    }
    const pid_t victim = cluster.ChildPid("--rank=1");
    ASSERT_GT(victim, 0);
    killed = kill(victim, SIGKILL) == 0;
  });
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
  grpc::ClientContext context;
  context.set_deadline(DeadlineIn(std::chrono::seconds(10)));
  v1::ServerState state;
  ASSERT_TRUE(cluster.stub().GetServerState(&context, v1::GetServerStateRequest(), &state).ok());
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
  const int64_t steps_before = Steps(cluster);
  bool stopped = false;
  std::vector<Outcome> got = RunAll(cluster, [&] {
    const absl::Time until = absl::Now() + absl::Seconds(60);
    while (Steps(cluster) < steps_before + 20 && absl::Now() < until) {
      absl::SleepFor(absl::Milliseconds(5));
    }
    const pid_t victim = cluster.ChildPid("--rank=0");
    ASSERT_GT(victim, 0);
    stopped = kill(victim, SIGSTOP) == 0;
  });
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
    grpc::ClientContext context;
    context.set_deadline(DeadlineIn(std::chrono::seconds(5)));
    v1::ServerState state;
    if (now > 0 && now != victim &&
        cluster.stub().GetServerState(&context, v1::GetServerStateRequest(), &state).ok()) {
      replaced = state.lifecycle() == v1::LIFECYCLE_READY;
    }
  }
  ASSERT_TRUE(replaced) << "no replacement group within 30 s";
  std::vector<uint32_t> tokens;
  ASSERT_TRUE(cluster.Greedy({7, 8, 9}, 12, tokens).ok());
  EXPECT_EQ(tokens.size(), 12u);
}

}  // namespace
}  // namespace weir
