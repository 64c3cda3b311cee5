// tests/logprobs_test.cc
//
// Logprobs on local clusters (tiny model): what a request gets with
// top_logprobs and prompt_logprobs does not depend on how its prompt was
// prefilled. A reference cluster prefills each prompt in one chunk, one
// request at a time; a second cluster splits prompts into 16-token chunks
// (prompt positions scored across chunk boundaries from the previous chunk's
// last logits) and has KV pools so small that the concurrent requests are
// preempted and recomputed (prompt logprobs must arrive once, in order).
// Every prompt entry, every generated token and its logprob must agree.

#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include "base/grpc_util.h"
#include "gtest/gtest.h"
#include "tests/local_cluster.h"

namespace weir {
namespace {

using testing_util::Cluster;

constexpr int kPromptLen = 60;
constexpr int kRequests = 12;

v1::GenerateRequest Scored(int index) {
  v1::GenerateRequest request;
  for (int i = 0; i < kPromptLen; ++i) {
    request.mutable_tokens()->add_ids(5 + (i * 37 + index * 101) % 4000);
  }
  request.mutable_stop()->set_max_new_tokens(24);
  request.mutable_stop()->set_ignore_eos(true);
  request.mutable_sampling()->set_temperature(0.0f);
  request.mutable_output()->set_top_logprobs(3);
  request.mutable_output()->set_prompt_logprobs(2);
  return request;
}

// The one Final of a non-streamed call (its status in `status`).
v1::GenerateEvent::Final Call(Cluster& cluster, const v1::GenerateRequest& request,
                             grpc::Status& status) {
  grpc::ClientContext context;
  context.set_deadline(DeadlineIn(std::chrono::seconds(240)));
  auto reader = cluster.stub().Generate(&context, request);
  v1::GenerateEvent event;
  v1::GenerateEvent::Final final_event;
  while (reader->Read(&event)) {
    if (event.has_final()) final_event = event.final();
  }
  status = reader->Finish();
  return final_event;
}

void ExpectSameEntry(const v1::TokenLogprobs& a, const v1::TokenLogprobs& b,
                     const std::string& where) {
  EXPECT_EQ(a.token_id(), b.token_id()) << where;
  EXPECT_NEAR(a.logprob(), b.logprob(), 1e-4) << where;
  EXPECT_EQ(a.rank(), b.rank()) << where;
  ASSERT_EQ(a.top_size(), b.top_size()) << where;
  for (int k = 0; k < a.top_size(); ++k) {
    EXPECT_EQ(a.top(k).token_id(), b.top(k).token_id()) << where << " top " << k;
    EXPECT_NEAR(a.top(k).logprob(), b.top(k).logprob(), 1e-4) << where << " top " << k;
  }
}

TEST(LogprobsTest, ChunkedAndPreemptedPrefillsScoreLikeOneChunk) {
  std::vector<v1::GenerateEvent::Final> reference(kRequests);
  {
    Cluster one_chunk({"--workers=1"});
    for (int i = 0; i < kRequests; ++i) {
      grpc::Status status;
      reference[i] = Call(one_chunk, Scored(i), status);
      ASSERT_TRUE(status.ok()) << status.error_message();
      ASSERT_EQ(reference[i].prompt_logprobs().tokens_size(), kPromptLen);
      ASSERT_EQ(reference[i].logprobs_size(), 24);
    }
  }
  // 8 blocks of 16 positions per rank: a sequence of 60 + 24 positions takes
  // 6, so the 6 requests of a rank keep preempting each other.
  Cluster chunked({"--workers=2", "--max_prefill_tokens=16", "--kv_block_tokens=16",
                   "--worker_flags=--kv_cache_blocks=8"});
  std::vector<v1::GenerateEvent::Final> got(kRequests);
  std::vector<grpc::Status> statuses(kRequests);
  std::vector<std::thread> clients;
  for (int i = 0; i < kRequests; ++i) {
    clients.emplace_back([&, i] { got[i] = Call(chunked, Scored(i), statuses[i]); });
  }
  for (std::thread& t : clients) t.join();
  v1::ServerState state;
  ASSERT_TRUE(chunked.State(state).ok());
  EXPECT_GT(state.preemptions(), 0u);

  for (int i = 0; i < kRequests; ++i) {
    const std::string request = "request " + std::to_string(i);
    ASSERT_TRUE(statuses[i].ok()) << request << ": " << statuses[i].error_message();
    EXPECT_EQ(
        std::vector<uint32_t>(got[i].full_token_ids().begin(), got[i].full_token_ids().end()),
        std::vector<uint32_t>(reference[i].full_token_ids().begin(),
                              reference[i].full_token_ids().end()))
        << request;
    const v1::PromptLogprobs& p = got[i].prompt_logprobs();
    ASSERT_EQ(p.tokens_size(), kPromptLen) << request;
    // The first prompt token has nothing before it.
    EXPECT_FALSE(p.tokens(0).has_rank()) << request;
    EXPECT_EQ(p.tokens(0).top_size(), 0) << request;
    for (int pos = 0; pos < kPromptLen; ++pos) {
      EXPECT_EQ(p.tokens(pos).token_id(), Scored(i).tokens().ids(pos)) << request;
      ExpectSameEntry(p.tokens(pos), reference[i].prompt_logprobs().tokens(pos),
                      request + " prompt position " + std::to_string(pos));
    }
    ASSERT_EQ(got[i].logprobs_size(), 24) << request;
    for (int k = 0; k < 24; ++k) {
      EXPECT_EQ(got[i].logprobs(k).token_id(), got[i].full_token_ids(k)) << request;
      ExpectSameEntry(got[i].logprobs(k), reference[i].logprobs(k),
                      request + " token " + std::to_string(k));
    }
  }
}

}  // namespace
}  // namespace weir
