// coordinator/scheduler/zero_overhead_test.cc
//
// Zero-overhead stepping (plan t+1 built before result t is applied) and
// plain stepping produce the same token streams, equal to the fake model run
// one request at a time: on several DP ranks behind the router, with chunked
// prefill, and with a KV pool small enough to force preemptions.

#include <memory>
#include <random>
#include <vector>

#include "coordinator/scheduler/fake_worker.h"
#include "coordinator/scheduler/group_driver.h"
#include "coordinator/scheduler/rank_scheduler.h"
#include "coordinator/scheduler/router.h"
#include "coordinator/scheduler/step_type_policy.h"
#include "gtest/gtest.h"

namespace weir::coordinator::scheduler {
namespace {

struct Scenario {
  int num_ranks = 2;
  int32_t num_blocks = 256;
  int64_t prefill_budget = 2048;
  int32_t decode_batch = 16;
  StepTypePolicyConfig policy;
};

struct Outcome {
  absl::flat_hash_map<RequestId, Stream> streams;
  int64_t preemptions = 0;
  int64_t steps = 0;
};

RankSchedulerConfig RankConfig(const Scenario& sc) {
  RankSchedulerConfig c;
  c.kv.block_tokens = 8;
  c.kv.compress_ratios = {2, 1};
  c.kv.num_blocks = sc.num_blocks;
  c.kv.num_seq_slots = 24;
  c.max_model_len = 96;
  c.max_prefill_tokens = sc.prefill_budget;
  c.max_decode_batch = sc.decode_batch;
  c.eos_token_ids = {0};
  return c;
}

// 32 prompts of 1..60 tokens; half arrive at step 0, the rest one per step.
std::vector<SeqRequest> MixedBatch() {
  std::mt19937_64 rng(2024);
  std::vector<SeqRequest> out;
  for (uint64_t id = 0; id < 32; ++id) {
    SeqRequest r;
    r.id = RequestId(id);
    r.prompt.resize(1 + rng() % 60);
    for (uint32_t& t : r.prompt) t = static_cast<uint32_t>(1 + rng() % 63);
    r.max_new_tokens = static_cast<uint32_t>(4 + rng() % 40);
    r.ignore_eos = id % 3 == 0;
    out.push_back(std::move(r));
  }
  return out;
}

Outcome Run(const Scenario& sc, bool zero_overhead) {
  const RankSchedulerConfig config = RankConfig(sc);
  std::vector<std::unique_ptr<RankScheduler>> ranks;
  std::vector<std::unique_ptr<FakeWorker>> workers;
  std::vector<RankScheduler*> rank_ptrs;
  std::vector<FakeWorker*> worker_ptrs;
  for (int r = 0; r < sc.num_ranks; ++r) {
    ranks.push_back(*RankScheduler::Create(config));
    workers.push_back(std::make_unique<FakeWorker>(config.kv, FakeModel{}));
    rank_ptrs.push_back(ranks.back().get());
    worker_ptrs.push_back(workers.back().get());
  }
  GroupDriver driver(rank_ptrs, worker_ptrs, *StepTypePolicy::Create(sc.policy), zero_overhead);
  LeastLoadedRouter router;
  const std::vector<SeqRequest> batch = MixedBatch();
  for (size_t i = 0; i < batch.size(); ++i) {
    if (i >= 16) {
      EXPECT_TRUE(driver.Step().ok());
    }
    std::vector<RankLoad> loads;
    for (const auto& r : ranks) loads.push_back(r->Load());
    const Rank rank = *router.Route(batch[i], loads);
    EXPECT_TRUE(ranks[rank.value()]->Add(batch[i]).ok());
  }
  const absl::Status s = driver.RunToIdle(20000);
  EXPECT_TRUE(s.ok()) << s;
  Outcome out;
  out.streams = driver.streams();
  out.steps = driver.num_steps();
  for (const auto& r : ranks) {
    out.preemptions += r->num_preemptions();
    EXPECT_EQ(r->blocks().num_free_blocks(), r->blocks().num_blocks());
    EXPECT_TRUE(r->blocks().VerifyAccounting().ok());
  }
  return out;
}

void ExpectSameStreams(const Scenario& sc, int64_t min_preemptions) {
  const Outcome plain = Run(sc, /*zero_overhead=*/false);
  const Outcome zero = Run(sc, /*zero_overhead=*/true);
  const RankSchedulerConfig config = RankConfig(sc);
  for (const SeqRequest& req : MixedBatch()) {
    FinishReason reason;
    const std::vector<uint32_t> want =
        ReferenceOutput(FakeModel{}, req, config.eos_token_ids, config.max_model_len, &reason);
    ASSERT_TRUE(plain.streams.contains(req.id) && zero.streams.contains(req.id));
    const Stream& p = plain.streams.at(req.id);
    const Stream& z = zero.streams.at(req.id);
    EXPECT_EQ(p.tokens, want) << "plain, request " << req.id.value();
    EXPECT_EQ(z.tokens, want) << "zero-overhead, request " << req.id.value();
    EXPECT_EQ(p.finish, reason);
    EXPECT_EQ(z.finish, reason);
  }
  EXPECT_GE(plain.preemptions, min_preemptions);
  EXPECT_GE(zero.preemptions, min_preemptions);
}

TEST(ZeroOverheadTest, SameStreamsOnTwoRanks) { ExpectSameStreams(Scenario{}, 0); }

TEST(ZeroOverheadTest, SameStreamsWithChunkedPrefill) {
  Scenario sc;
  sc.prefill_budget = 7;
  ExpectSameStreams(sc, 0);
}

TEST(ZeroOverheadTest, SameStreamsWithPreemption) {
  Scenario sc;
  sc.num_blocks = 14;  // 96 tokens of the longest sequence take 12 blocks
  sc.prefill_budget = 16;
  ExpectSameStreams(sc, 5);
}

TEST(ZeroOverheadTest, SameStreamsOnFourRanksWithAttemptPoints) {
  Scenario sc;
  sc.num_ranks = 4;
  sc.decode_batch = 3;
  sc.policy.prefill_attempt_interval = 4;
  sc.policy.prefill_any_attempt_interval = 6;
  ExpectSameStreams(sc, 0);
}

}  // namespace
}  // namespace weir::coordinator::scheduler
