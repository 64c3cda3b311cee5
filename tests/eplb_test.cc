// EPLB end to end on real processes (CPU, DP4 x EP4, the tiny model with a
// skewed router: the first quarter of each MoE layer's experts is favoured,
// and the initial map puts them all on rank 0). A batch of greedy requests
// decodes while EPLB measures the load, plans a map with the 4 redundant
// slots, has the workers move expert weights between them and the
// coordinator switch the map at a step boundary. The outputs must equal a
// run without EPLB token for token, the committed map's predicted balance
// must beat the initial one, and the balance measured from the ranks'
// served rows must improve with it. With EPLB killed afterwards, serving
// goes on, on the last committed map.
#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/grpc_util.h"
#include "gtest/gtest.h"
#include "proto/eplb.grpc.pb.h"
#include "proto/inference.grpc.pb.h"
#include "proto/worker.grpc.pb.h"
#include "tests/local_cluster.h"

namespace weir {
namespace {

using testing_util::Cluster;
using testing_util::SkewedTinyModel;

constexpr int kRequests = 12;
constexpr uint32_t kNewTokens = 40;

std::vector<std::vector<uint32_t>> Prompts() {
  std::vector<std::vector<uint32_t>> prompts;
  for (int i = 0; i < kRequests; ++i) {
    std::vector<uint32_t> p;
    for (int j = 0; j < 4 + (i * 5) % 17; ++j) p.push_back((11 + i * 37 + j * 19) % 4000);
    prompts.push_back(p);
  }
  return prompts;
}

// Runs every prompt concurrently; returns the outputs by prompt.
std::vector<std::vector<uint32_t>> RunBatch(Cluster& cluster) {
  const std::vector<std::vector<uint32_t>> prompts = Prompts();
  std::vector<std::vector<uint32_t>> out(prompts.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < prompts.size(); ++i) {
    threads.emplace_back([&, i] {
      grpc::Status s = cluster.Greedy(prompts[i], kNewTokens, out[i]);
      EXPECT_TRUE(s.ok()) << "request " << i << ": " << s.error_message();
    });
  }
  for (std::thread& t : threads) t.join();
  return out;
}

v1::ServerState ServerState(Cluster& cluster) {
  grpc::ClientContext context;
  v1::ServerState state;
  EXPECT_TRUE(cluster.stub().GetServerState(&context, v1::GetServerStateRequest(), &state).ok());
  return state;
}

v1::EplbState EplbState(Cluster& cluster) {
  const v1::ServerState state = ServerState(cluster);
  v1::EplbState eplb_state;
  if (state.eplb_address().empty()) return eplb_state;
  auto eplb = v1::Eplb::NewStub(MakeChannel(state.eplb_address()));
  grpc::ClientContext eplb_context;
  EXPECT_TRUE(eplb->GetState(&eplb_context, v1::GetEplbStateRequest(), &eplb_state).ok());
  return eplb_state;
}

TEST(EplbTest, RebalancesWhileDecodingWithIdenticalOutputs) {
  const std::string model_dir = SkewedTinyModel("tiny_skewed", /*with_tokenizer=*/false);
  const std::vector<std::string> common = {"--workers=4", "--model_dir=" + model_dir,
                                           "--num_redundant_experts=4"};
  std::vector<std::vector<uint32_t>> want;
  {
    std::vector<std::string> flags = common;
    flags.push_back("--eplb=false");
    Cluster cluster(flags);
    want = RunBatch(cluster);
  }
  std::vector<std::string> flags = common;
  flags.insert(flags.end(), {"--eplb=true", "--eplb_stat_interval=2",
                             "--eplb_flags=--rearrange_interval=3 --min_window_rounds=2 "
                             "--gain_threshold=0.02"});
  Cluster cluster(flags);
  const std::vector<std::vector<uint32_t>> got = RunBatch(cluster);
  // The batch decoded across the switch: a second batch runs on the new map.
  const std::vector<std::vector<uint32_t>> again = RunBatch(cluster);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(got[i], want[i]) << "request " << i;
    EXPECT_EQ(again[i], want[i]) << "request " << i << " (second batch)";
  }

  v1::EplbState state = EplbState(cluster);
  ASSERT_GE(state.committed_version(), 1u) << state.DebugString();
  ASSERT_GE(state.history_size(), 1);
  const v1::EplbState::Rebalance& first = state.history(0);
  EXPECT_TRUE(first.committed()) << first.DebugString();
  EXPECT_LT(first.ratio_after(), first.ratio_before());
  EXPECT_GT(first.bytes_moved(), 0u);
  EXPECT_GT(first.measured_before(), 1.0);
  // Measured under the rebalanced maps: better than before. A map's ratio is
  // measured over the windows it served, and this test's batches are small:
  // a window at a batch's sparse end measures noise (seen on loaded machines:
  // the latest map 2.50 against 2.47 before, with 8 maps committed; the
  // first rebalanced one 1.387 against 1.383, then 1.234). So the best of
  // the rebalanced maps' measurements (each later rebalance's measured_before,
  // and the ratio now) must beat the original map's; maps that made the
  // balance worse would not.
  double best_after = state.measured_ratio() > 0 ? state.measured_ratio() : 1e30;
  for (int i = 1; i < state.history_size(); ++i) {
    if (state.history(i).measured_before() > 0) {  // 0: no window under that map yet
      best_after = std::min(best_after, state.history(i).measured_before());
    }
  }
  EXPECT_LT(best_after, 1e30) << "no window measured under a rebalanced map";
  EXPECT_LT(best_after, first.measured_before());
  std::printf(
      "maps committed %llu; first: predicted %.3f -> %.3f, measured %.3f -> best %.3f (now %.3f), "
      "%llu bytes moved, prepare %.1f ms, commit %.1f ms\n",
      static_cast<unsigned long long>(state.committed_version()), first.ratio_before(),
      first.ratio_after(), first.measured_before(), best_after, state.measured_ratio(),
      static_cast<unsigned long long>(first.bytes_moved()), first.prepare_ms(), first.commit_ms());

  // EPLB down: serving continues on the last committed map.
  const pid_t eplb = cluster.ChildPid("eplb/main");
  ASSERT_GT(eplb, 0);
  ASSERT_EQ(kill(eplb, SIGKILL), 0);
  // A commit EPLB asked for just before may still land in the next step.
  std::vector<uint32_t> ignored;
  ASSERT_TRUE(cluster.Greedy({5, 6, 7}, 4, ignored).ok());
  const uint64_t version = ServerState(cluster).expert_map_version();
  EXPECT_GE(version, state.committed_version());
  const std::vector<std::vector<uint32_t>> after = RunBatch(cluster);
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(after[i], want[i]) << "request " << i << " (EPLB down)";
  }
  EXPECT_EQ(ServerState(cluster).expert_map_version(), version);
}

// The control plane without EPLB, on an idle cluster: a map prepared on every
// worker (in parallel: the prepare is collective) and committed through the
// coordinator switches at the next step (an empty one, since nothing runs),
// GetPlacement shows it, and outputs do not change. Stale and malformed
// commits are refused.
TEST(EplbTest, IdleClusterCommitsAPreparedMap) {
  Cluster cluster({"--workers=2", "--num_redundant_experts=2"});
  std::vector<uint32_t> before, after;
  ASSERT_TRUE(cluster.Greedy({9, 8, 7, 6}, 12, before).ok());
  auto coordinator = v1::Coordinator::NewStub(MakeChannel(cluster.address()));
  v1::PlacementInfo placement;
  {
    grpc::ClientContext context;
    ASSERT_TRUE(coordinator->GetPlacement(&context, v1::GetPlacementRequest(), &placement).ok());
  }
  ASSERT_EQ(placement.workers_size(), 2);
  v1::ExpertMap map = placement.committed_map();
  ASSERT_EQ(map.version(), 0u);
  ASSERT_EQ(map.num_physical(), 10u);  // 8 experts + 2 redundant over 2 ranks
  // Reverse every layer's slots: each rank gains the experts the other held.
  map.set_version(1);
  for (uint32_t l = 0; l < map.num_layers(); ++l) {
    auto* p = map.mutable_physical_to_logical();
    std::reverse(p->begin() + l * map.num_physical(), p->begin() + (l + 1) * map.num_physical());
  }
  std::vector<grpc::Status> prepared(2);
  std::vector<v1::PrepareExpertMapResponse> responses(2);
  std::vector<std::thread> calls;
  for (int r = 0; r < 2; ++r) {
    calls.emplace_back([&, r] {
      auto worker = v1::Worker::NewStub(MakeChannel(placement.workers(r).address()));
      v1::PrepareExpertMapRequest request;
      request.set_coordinator_epoch(placement.coordinator_epoch());
      request.set_group_epoch(placement.workers(r).group_epoch());  // the group's fence
      *request.mutable_map() = map;
      grpc::ClientContext context;
      prepared[r] = worker->PrepareExpertMap(&context, request, &responses[r]);
    });
  }
  for (std::thread& t : calls) t.join();
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(prepared[r].ok()) << prepared[r].error_message();
    EXPECT_EQ(responses[r].prepared_version(), 1u);
    EXPECT_GT(responses[r].bytes_staged(), 0u);
  }
  {
    v1::CommitExpertMapRequest request;
    request.set_version(1);
    *request.mutable_map() = map;
    v1::CommitExpertMapResponse response;
    grpc::ClientContext context;
    grpc::Status s = coordinator->CommitExpertMap(&context, request, &response);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(response.committed_version(), 1u);
  }
  {
    grpc::ClientContext context;
    ASSERT_TRUE(coordinator->GetPlacement(&context, v1::GetPlacementRequest(), &placement).ok());
    EXPECT_EQ(placement.committed_map().version(), 1u);
    EXPECT_EQ(placement.committed_map().physical_to_logical(0), map.physical_to_logical(0));
  }
  ASSERT_TRUE(cluster.Greedy({9, 8, 7, 6}, 12, after).ok());
  EXPECT_EQ(after, before);
  EXPECT_EQ(ServerState(cluster).expert_map_version(), 1u);
  // Not newer than the committed map: ABORTED. Another shape: INVALID_ARGUMENT.
  {
    v1::CommitExpertMapRequest request;
    request.set_version(1);
    *request.mutable_map() = map;
    v1::CommitExpertMapResponse response;
    grpc::ClientContext context;
    EXPECT_EQ(coordinator->CommitExpertMap(&context, request, &response).error_code(),
              grpc::StatusCode::ABORTED);
  }
  {
    v1::CommitExpertMapRequest request;
    request.set_version(2);
    *request.mutable_map() = map;
    request.mutable_map()->set_version(2);
    request.mutable_map()->set_num_physical(12);
    v1::CommitExpertMapResponse response;
    grpc::ClientContext context;
    EXPECT_EQ(coordinator->CommitExpertMap(&context, request, &response).error_code(),
              grpc::StatusCode::INVALID_ARGUMENT);
  }
}

}  // namespace
}  // namespace weir
