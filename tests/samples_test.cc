// tests/samples_test.cc
//
// Parallel sampling (num_samples) on a local cluster whose KV pools are
// small (8 blocks of 16 positions per rank): six concurrent calls of three
// seeded samples each, then one more alone. Three 40-token prompts need 9
// blocks, so a call's third sample never fits beside the other two and
// prefills on its own; alone, the second forks the first's prefill; in the
// crowd, sequences are also preempted and recomputed. Every sample must
// equal a one-sample request with its seed (seed + index) run alone on an
// ordinary cluster.

#include <string>
#include <thread>
#include <vector>

#include "base/grpc_util.h"
#include "gtest/gtest.h"
#include "tests/local_cluster.h"

namespace weir {
namespace {

using testing_util::Cluster;

constexpr int kConcurrent = 6;
constexpr int kCalls = kConcurrent + 1;  // the last one alone
constexpr uint32_t kSamples = 3;

v1::GenerateRequest Request(int call, uint32_t samples, uint64_t seed) {
  v1::GenerateRequest request;
  for (int i = 0; i < 40; ++i) request.mutable_tokens()->add_ids(5 + (i * 53 + call * 97) % 4000);
  request.mutable_stop()->set_max_new_tokens(16);
  request.mutable_stop()->set_ignore_eos(true);
  request.mutable_sampling()->set_temperature(1.0f);
  request.mutable_sampling()->set_seed(seed);
  request.mutable_sampling()->set_num_samples(samples);
  return request;
}

// Token ids of each sample of a non-streamed call, by sample index.
std::vector<std::vector<uint32_t>> Call(Cluster& cluster, const v1::GenerateRequest& request,
                                        grpc::Status& status) {
  grpc::ClientContext context;
  context.set_deadline(DeadlineIn(std::chrono::seconds(240)));
  auto reader = cluster.stub().Generate(&context, request);
  v1::GenerateEvent event;
  std::vector<std::vector<uint32_t>> out(std::max<uint32_t>(request.sampling().num_samples(), 1));
  while (reader->Read(&event)) {
    if (!event.has_final() || event.final().sample_index() >= out.size()) continue;
    out[event.final().sample_index()].assign(event.final().full_token_ids().begin(),
                                            event.final().full_token_ids().end());
  }
  status = reader->Finish();
  return out;
}

TEST(SamplesTest, ForkedAndCrowdedSamplesEqualLoneRequests) {
  Cluster crowded({"--workers=2", "--kv_block_tokens=16", "--worker_flags=--kv_cache_blocks=8"});
  std::vector<std::vector<std::vector<uint32_t>>> got(kCalls);
  std::vector<grpc::Status> statuses(kCalls);
  std::vector<std::thread> clients;
  for (int c = 0; c < kConcurrent; ++c) {
    clients.emplace_back(
        [&, c] { got[c] = Call(crowded, Request(c, kSamples, 1000 * c), statuses[c]); });
  }
  for (std::thread& t : clients) t.join();
  const int last = kCalls - 1;
  got[last] = Call(crowded, Request(last, kSamples, 1000 * last), statuses[last]);
  v1::ServerState state;
  ASSERT_TRUE(crowded.State(state).ok());
  EXPECT_GT(state.forked_samples(), 0u);  // at least the call alone's second sample
  EXPECT_LE(state.forked_samples(), static_cast<uint64_t>(kCalls))
      << "a third sample forked: the pools were meant to be too small for it";

  Cluster alone({"--workers=1"});
  for (int c = 0; c < kCalls; ++c) {
    ASSERT_TRUE(statuses[c].ok()) << "call " << c << ": " << statuses[c].error_message();
    for (uint32_t i = 0; i < kSamples; ++i) {
      grpc::Status status;
      std::vector<std::vector<uint32_t>> one = Call(alone, Request(c, 1, 1000 * c + i), status);
      ASSERT_TRUE(status.ok()) << status.error_message();
      EXPECT_EQ(got[c][i].size(), 16u);
      EXPECT_EQ(got[c][i], one[0]) << "call " << c << " sample " << i;
    }
  }
}

}  // namespace
}  // namespace weir
