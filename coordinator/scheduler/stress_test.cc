// coordinator/scheduler/stress_test.cc
//
// 10^5 random admit / finish / preempt / cancel events per stepping mode
// (plain or zero-overhead, each also with speculative rows of 3 drafts of
// which the fake worker accepts a random number) on
// one rank with a KV pool small enough to preempt often (about 5 x 10^4
// requests). After every step the block books match a recount (free + used
// == total) and the worker's mirror of the plans: a block the worker holds
// is in use in the books, or its slot's release is queued for the next plan
// (no plan can give it out before that release); the worker refuses any
// plan that gives a held block to another slot (double ownership). After
// draining and one more plan, every block and slot is free in the books and
// on the worker (nothing leaked); every stream equals the fake model's
// reference output (a prefix of it when cancelled).

#include <algorithm>
#include <iostream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "coordinator/scheduler/fake_worker.h"
#include "coordinator/scheduler/group_driver.h"
#include "coordinator/scheduler/rank_scheduler.h"
#include "coordinator/scheduler/step_type_policy.h"
#include "gtest/gtest.h"

namespace weir::coordinator::scheduler {
namespace {

constexpr int64_t kEvents = 100000;

RankSchedulerConfig StressConfig(int32_t drafts) {
  RankSchedulerConfig c;
  c.num_draft_tokens = drafts;
  c.kv.block_tokens = 8;
  c.kv.compress_ratios = {2, 2, 4};
  // Speculating sequences end in fewer steps: a smaller pool keeps them
  // preempting as often.
  c.kv.num_blocks = drafts > 0 ? 14 : 24;
  c.kv.num_seq_slots = 10;
  c.max_model_len = 48;
  c.max_prefill_tokens = 24;
  c.max_decode_batch = 6;
  c.max_running = 8;
  c.eos_token_ids = {0};
  return c;
}

SeqRequest RandomRequest(uint64_t id, std::mt19937_64& rng) {
  SeqRequest r;
  r.id = RequestId(id);
  r.prompt.resize(1 + rng() % 30);
  for (uint32_t& t : r.prompt) t = static_cast<uint32_t>(rng() % 64);
  r.max_new_tokens = static_cast<uint32_t>(1 + rng() % 24);
  if (rng() % 3 == 0) r.stop_token_ids = {static_cast<uint32_t>(rng() % 64)};
  r.ignore_eos = rng() % 4 == 0;
  if (rng() % 5 == 0) r.min_new_tokens = static_cast<uint32_t>(rng() % 4);
  return r;
}

// OK if every block `worker` holds is in use in the books of `sched`, or
// held by a slot whose release the next plan carries.
absl::Status CheckWorkerMirror(const RankScheduler& sched, const FakeWorker& worker) {
  const BlockManager& bm = sched.blocks();
  for (const auto& [block, slot] : worker.block_owners()) {
    if (block < 0 || block >= bm.num_blocks()) {
      return absl::InternalError(absl::StrCat("the worker holds foreign block ", block));
    }
    if (bm.references(BlockId(block)) > 0) continue;
    const std::vector<SeqSlot>& queued = sched.slots_to_release();
    if (std::find(queued.begin(), queued.end(), SeqSlot(slot)) == queued.end()) {
      return absl::InternalError(absl::StrCat("block ", block, " is free in the books but slot ",
                                              slot, " still holds it with no release queued"));
    }
  }
  return absl::OkStatus();
}

// (zero-overhead stepping, DSpark drafts a speculative row verifies: 0 = off).
class StressTest : public ::testing::TestWithParam<std::pair<bool, int32_t>> {};

TEST_P(StressTest, RandomEventsNeverLeakAndStreamsMatchTheModel) {
  const bool zero_overhead = GetParam().first;
  const RankSchedulerConfig config = StressConfig(GetParam().second);
  const FakeModel model;
  auto sched = *RankScheduler::Create(config);
  FakeWorker worker(config.kv, model);
  StepTypePolicyConfig pc;
  pc.prefill_attempt_interval = 3;
  pc.prefill_any_attempt_interval = 5;
  GroupDriver driver({sched.get()}, {&worker}, *StepTypePolicy::Create(pc), zero_overhead);
  std::mt19937_64 rng((zero_overhead ? 7 : 8) + GetParam().second);
  std::vector<SeqRequest> requests;
  std::vector<uint64_t> live;
  int64_t adds = 0, cancels = 0;
  const BlockManager& bm = sched->blocks();
  // Cancellations count as finishes of the driver.
  auto events = [&] { return adds + driver.num_finished() + sched->num_preemptions(); };
  while (events() < kEvents) {
    std::erase_if(live, [&](uint64_t id) {
      auto it = driver.streams().find(RequestId(id));
      return it != driver.streams().end() && it->second.finish != FinishReason::kNone;
    });
    const uint64_t r = rng() % 16;
    if (r < 3 && live.size() < 20) {
      requests.push_back(RandomRequest(requests.size(), rng));
      ASSERT_TRUE(sched->Add(requests.back()).ok());
      live.push_back(requests.back().id.value());
      ++adds;
    } else if (r == 3 && !live.empty()) {
      const size_t i = rng() % live.size();
      ASSERT_TRUE(sched->Cancel(RequestId(live[i])).ok());
      driver.RecordCancel(RequestId(live[i]));
      live.erase(live.begin() + static_cast<long>(i));
      ++cancels;
    } else {
      ASSERT_TRUE(driver.Step().ok());
    }
    ASSERT_EQ(bm.num_free_blocks() + bm.num_used_blocks(), bm.num_blocks());
    ASSERT_TRUE(bm.VerifyAccounting().ok()) << bm.VerifyAccounting();
    const absl::Status mirrored = CheckWorkerMirror(*sched, worker);
    ASSERT_TRUE(mirrored.ok()) << mirrored;
  }
  ASSERT_TRUE(driver.RunToIdle(100000).ok());
  // One more (empty) plan carries the last releases to the worker.
  ASSERT_TRUE(driver.Step().ok());
  ASSERT_TRUE(driver.Flush().ok());
  EXPECT_TRUE(worker.block_owners().empty()) << worker.block_owners().size() << " blocks held";
  EXPECT_TRUE(sched->slots_to_release().empty());
  EXPECT_GT(requests.size(), 10000u);
  EXPECT_EQ(bm.num_free_blocks(), bm.num_blocks());
  EXPECT_EQ(bm.num_free_slots(), config.kv.num_seq_slots);
  EXPECT_EQ(bm.num_pending_release_blocks(), 0);
  EXPECT_TRUE(bm.VerifyAccounting().ok());
  EXPECT_GT(sched->num_preemptions(), 100);
  EXPECT_GT(cancels, 100);

  int64_t compared = 0;
  for (const SeqRequest& req : requests) {
    FinishReason want_reason;
    const std::vector<uint32_t> want =
        ReferenceOutput(model, req, config.eos_token_ids, config.max_model_len, &want_reason);
    auto it = driver.streams().find(req.id);
    const Stream got = it == driver.streams().end() ? Stream{} : it->second;
    if (got.finish == FinishReason::kCancelled) {
      ASSERT_LE(got.tokens.size(), want.size());
      ASSERT_TRUE(std::equal(got.tokens.begin(), got.tokens.end(), want.begin()));
    } else {
      ASSERT_EQ(got.tokens, want) << "request " << req.id.value();
      ASSERT_EQ(got.finish, want_reason) << "request " << req.id.value();
      ++compared;
    }
  }
  EXPECT_GT(compared, 1000);
  if (config.num_draft_tokens > 0) {
    // The fake worker accepts 0..3 drafts: every count occurs.
    ASSERT_EQ(sched->accepted_histogram().size(), 4u);
    for (int64_t n : sched->accepted_histogram()) EXPECT_GT(n, 100);
    EXPECT_GT(sched->verified_drafts(), 0);
  }
  std::cout << (zero_overhead ? "zero-overhead" : "plain") << ": " << requests.size()
            << " requests, " << cancels << " cancelled, " << sched->num_preemptions()
            << " preemptions, " << driver.num_steps() << " steps, " << worker.rows_executed()
            << " rows\n";
}

INSTANTIATE_TEST_SUITE_P(Modes, StressTest,
                         ::testing::Values(std::pair{false, 0}, std::pair{true, 0},
                                           std::pair{false, 3}, std::pair{true, 3}),
                         [](const auto& info) {
                           return std::string(info.param.first ? "ZeroOverhead" : "Plain") +
                                  (info.param.second > 0 ? "Speculative" : "");
                         });

}  // namespace
}  // namespace weir::coordinator::scheduler
