// CED bounded replay served end to end (coordinator --ced_replay): a local
// cluster of 2 CPU workers generates greedily for concurrent prompts of 3-31
// tokens (the random tiny's window is 8, so most replay), and every output
// must equal the single-process model's with Model::StartCedReplay: with
// prompts chunked by --max_prefill_tokens, and with a KV pool small enough to
// force preemption (a recompute replays the same segment: the original
// prompt's), and with DSpark speculation (verification and rollback after the
// replay). --ced_replay with --backend=cuda exits with code 2.

#include <sys/wait.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "coordinator/model_provisioning.h"
#include "gtest/gtest.h"
#include "proto/inference.grpc.pb.h"
#include "tests/local_cluster.h"
#include "tests/reference_greedy.h"
#include "worker/model/checkpoint.h"
#include "worker/model/model.h"

namespace weir {
namespace {

using testing_util::CacheDir;
using testing_util::Cluster;
using testing_util::ReferenceGreedy;
using testing_util::Runfile;

std::vector<std::vector<uint32_t>> Prompts() {
  return testing_util::ArithmeticPrompts(24, 11, 37, 17);
}

// Serves Prompts() concurrently; returns how many outputs differ from the
// exact model's (each must equal the replaying model's).
int ExpectMatchesReplay(Cluster& cluster, uint32_t max_new) {
  absl::StatusOr<std::string> dir =
      coordinator::EnsureWeights(Runfile("models/random/tiny"), CacheDir(), 0);
  EXPECT_TRUE(dir.ok()) << dir.status();
  if (!dir.ok()) return 0;
  auto checkpoint = model::Checkpoint::Open(*dir);
  EXPECT_TRUE(checkpoint.ok()) << checkpoint.status();
  if (!checkpoint.ok()) return 0;
  auto reference = model::Model::Create((*checkpoint)->config(), **checkpoint);
  EXPECT_TRUE(reference.ok()) << reference.status();
  if (!reference.ok()) return 0;

  const auto prompts = Prompts();
  std::vector<std::vector<uint32_t>> outputs(prompts.size());
  std::vector<grpc::Status> statuses(prompts.size());
  std::vector<std::thread> clients;
  for (size_t i = 0; i < prompts.size(); ++i) {
    clients.emplace_back([&, i] { statuses[i] = cluster.Greedy(prompts[i], max_new, outputs[i]); });
  }
  for (std::thread& t : clients) t.join();
  int differ_from_exact = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_TRUE(statuses[i].ok()) << i << ": " << statuses[i].error_message();
    EXPECT_EQ(outputs[i], ReferenceGreedy(**reference, prompts[i], max_new, true))
        << "prompt " << i;
    differ_from_exact += outputs[i] != ReferenceGreedy(**reference, prompts[i], max_new, false);
  }
  return differ_from_exact;
}

TEST(CedReplayServeTest, ChunkedPrefillEqualsTheReplayingModel) {
  Cluster cluster({"--workers=2", "--ced_replay", "--max_prefill_tokens=16"});
  // Replay is on: on random weights it changes some greedy outputs.
  EXPECT_GT(ExpectMatchesReplay(cluster, 12), 0);
}

TEST(CedReplayServeTest, PreemptionKeepsReplayOutputs) {
  // As serve_test's PreemptionKeepsGreedyOutputs: 8 blocks of 16 positions a
  // worker, so the burst queues and preempts; recomputes replay again.
  Cluster cluster({"--workers=2", "--ced_replay", "--kv_block_tokens=16",
                   "--worker_flags=--kv_cache_blocks=8"});
  ExpectMatchesReplay(cluster, 24);
  grpc::ClientContext context;
  v1::ServerState state;
  ASSERT_TRUE(cluster.stub().GetServerState(&context, v1::GetServerStateRequest(), &state).ok());
  EXPECT_GT(state.preemptions(), 0u);
}

TEST(CedReplayServeTest, SpeculativeDecodingAfterAReplayPrefill) {
  // DSpark verification and rollback after replayed prompts: greedy speculation
  // is lossless, so the outputs are the replaying model's again.
  Cluster cluster({"--workers=2", "--ced_replay", "--speculative=dspark", "--verify_length=fixed"});
  ExpectMatchesReplay(cluster, 16);
}

TEST(CedReplayServeTest, CudaBackendExitsWithCode2) {
  const std::string command = Runfile("coordinator/main") +
                              " --listen=127.0.0.1:0 --eplb=false --workers=1 --model_dir=" +
                              Runfile("models/random/tiny") + " --model_cache_dir=" + CacheDir() +
                              " --ced_replay --backend=cuda 2>/dev/null";
  const int status = std::system(command.c_str());
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 2);
}

}  // namespace
}  // namespace weir
