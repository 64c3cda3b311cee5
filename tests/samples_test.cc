// tests/samples_test.cc
//
// Parallel sampling (num_samples) on a local cluster whose KV pools are
// small (8 blocks of 16 positions per rank): six concurrent calls of three
// seeded samples each, then one more alone. Three 40-token prompts need 9
// blocks, so a call's third sample never fits beside the other two and
// prefills on its own; alone, the second forks the first's prefill; in the
// crowd, sequences are also preempted and recomputed. Every sample must
// equal a one-sample request with its seed (seed + index) run alone on an
// ordinary cluster. GenerateBatch and BatchJobs items with three samples
// hold the same: each sample equals a one-sample request with its seed.

#include <map>
#include <string>
#include <thread>
#include <vector>

#include "base/grpc_util.h"
#include "gtest/gtest.h"
#include "proto/batch.grpc.pb.h"
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

// Token ids of each sample of a batch item's result, by sample index.
std::vector<std::vector<uint32_t>> ResultSamples(const v1::GenerateResult& result) {
  std::vector<std::vector<uint32_t>> out(result.samples_size());
  for (const v1::GenerateEvent::Final& f : result.samples()) {
    if (f.sample_index() < out.size()) {
      out[f.sample_index()].assign(f.full_token_ids().begin(), f.full_token_ids().end());
    }
  }
  return out;
}

// A GenerateBatch item and a BatchJobs item with num_samples 3 each hold 3
// samples, sample i equal to a one-sample request with seed + i; the samples
// fork sample 0's prefill.
TEST(SamplesTest, BatchItemsWithSamplesEqualLoneRequests) {
  Cluster cluster({"--workers=2"});
  v1::ServerState before;
  ASSERT_TRUE(cluster.State(before).ok());

  v1::GenerateBatchRequest batch;
  batch.set_batch_id("samples");
  v1::BatchItem* item = batch.add_items();
  item->set_custom_id("three");
  *item->mutable_request() = Request(100, kSamples, 2000);
  item = batch.add_items();
  item->set_custom_id("one");
  *item->mutable_request() = Request(101, 1, 2100);
  std::map<std::string, v1::GenerateResult> results;
  {
    grpc::ClientContext context;
    context.set_deadline(DeadlineIn(std::chrono::seconds(240)));
    auto reader = cluster.stub().GenerateBatch(&context, batch);
    v1::BatchEvent event;
    while (reader->Read(&event)) {
      if (!event.has_item_result()) continue;
      ASSERT_TRUE(event.item_result().has_result()) << event.item_result().error().message();
      results[event.item_result().custom_id()] = event.item_result().result();
    }
    grpc::Status status = reader->Finish();
    ASSERT_TRUE(status.ok()) << status.error_message();
  }
  ASSERT_EQ(results.size(), 2u);
  const std::vector<std::vector<uint32_t>> from_batch = ResultSamples(results["three"]);
  ASSERT_EQ(from_batch.size(), kSamples);
  EXPECT_EQ(ResultSamples(results["one"]).size(), 1u);

  auto jobs = v1::BatchJobs::NewStub(MakeChannel(cluster.address()));
  v1::CreateBatchJobRequest create;
  v1::BatchItem* job_item = create.mutable_items()->add_items();
  job_item->set_custom_id("three");
  *job_item->mutable_request() = Request(102, kSamples, 3000);
  v1::BatchJob job;
  {
    grpc::ClientContext context;
    grpc::Status status = jobs->CreateBatchJob(&context, create, &job);
    ASSERT_TRUE(status.ok()) << status.error_message();
  }
  std::vector<v1::BatchItemResult> job_results;
  {
    grpc::ClientContext context;
    context.set_deadline(DeadlineIn(std::chrono::seconds(240)));
    v1::ReadBatchResultsRequest read;
    read.set_job_id(job.id());
    auto reader = jobs->ReadBatchResults(&context, read);  // until the job ends
    v1::BatchItemResult r;
    while (reader->Read(&r)) job_results.push_back(r);
    grpc::Status status = reader->Finish();
    ASSERT_TRUE(status.ok()) << status.error_message();
  }
  ASSERT_EQ(job_results.size(), 1u);
  ASSERT_TRUE(job_results[0].item().has_result()) << job_results[0].item().error().message();
  const std::vector<std::vector<uint32_t>> from_job =
      ResultSamples(job_results[0].item().result());
  ASSERT_EQ(from_job.size(), kSamples);

  v1::ServerState after;
  ASSERT_TRUE(cluster.State(after).ok());
  EXPECT_GT(after.forked_samples(), before.forked_samples())
      << "no batch item's sample forked its prefill";

  for (uint32_t i = 0; i < kSamples; ++i) {
    grpc::Status status;
    std::vector<std::vector<uint32_t>> one = Call(cluster, Request(100, 1, 2000 + i), status);
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(from_batch[i].size(), 16u);
    EXPECT_EQ(from_batch[i], one[0]) << "GenerateBatch sample " << i;
    one = Call(cluster, Request(102, 1, 3000 + i), status);
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(from_job[i], one[0]) << "BatchJobs sample " << i;
  }
  EXPECT_NE(from_batch[0], from_batch[1]);  // the seeds differ
}

}  // namespace
}  // namespace weir
