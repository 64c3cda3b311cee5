// coordinator/scheduler/rank_scheduler_test.cc
//
// Planning rules of one rank, driven by hand-written results.

#include "coordinator/scheduler/rank_scheduler.h"

#include <string>
#include <vector>

#include "coordinator/scheduler/test_util.h"
#include "gtest/gtest.h"

namespace weir::coordinator::scheduler {
namespace {

TEST(RankSchedulerTest, RejectsBadRequests) {
  auto s = *RankScheduler::Create(SmallConfig(16));
  EXPECT_EQ(s->Add(MakeRequest(1, 0)).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s->Add(MakeRequest(1, 4, 0)).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s->Add(MakeRequest(1, 64)).code(), absl::StatusCode::kInvalidArgument);
  // 60 + 16 tokens, capped at 64, need 16 blocks: fits exactly; 17 would not.
  EXPECT_TRUE(s->Add(MakeRequest(1, 60)).ok());
  EXPECT_EQ(s->Add(MakeRequest(1, 4)).code(), absl::StatusCode::kAlreadyExists);
  auto small = *RankScheduler::Create(SmallConfig(15));
  const absl::Status too_big = small->Add(MakeRequest(2, 60));
  EXPECT_EQ(too_big.code(), absl::StatusCode::kInvalidArgument);
  // The error names the limit.
  EXPECT_NE(too_big.message().find("needs 16 KV blocks; the pool has 15"), std::string::npos)
      << too_big;
  EXPECT_EQ(s->Cancel(RequestId(9)).code(), absl::StatusCode::kNotFound);
  RankSchedulerConfig bad = SmallConfig(16);
  bad.max_prefill_tokens = 0;
  EXPECT_FALSE(RankScheduler::Create(bad).ok());
}

TEST(RankSchedulerTest, LoadShowsTheKvBooksAndQueuedReleases) {
  auto s = *RankScheduler::Create(SmallConfig(16));
  RankLoad load = s->Load();
  EXPECT_EQ(load.num_blocks, 16);
  EXPECT_EQ(load.num_free_blocks, 16);
  EXPECT_EQ(load.block_tokens, 4);
  EXPECT_EQ(load.num_seq_slots, 8);
  EXPECT_EQ(load.num_free_slots, 8);
  ASSERT_TRUE(s->Add(MakeRequest(1, 10)).ok());  // 3 blocks
  RankStepPlan p0 = *s->BuildPlan(0, StepType::kPrefill);
  ASSERT_EQ(p0.rows.size(), 1u);
  const SeqSlot slot = p0.rows[0].slot;
  load = s->Load();
  EXPECT_EQ(load.num_used_blocks, 3);
  EXPECT_EQ(load.num_free_slots, 7);
  // Cancelled while step 0 is in flight: the blocks wait for it, the slot's
  // release waits for the next plan.
  ASSERT_TRUE(s->Cancel(RequestId(1)).ok());
  EXPECT_EQ(s->slots_to_release(), std::vector<SeqSlot>{slot});
  EXPECT_EQ(s->Load().num_pending_release_blocks, 3);
  ASSERT_TRUE(s->OnResult(UniformResult(p0, 5)).ok());
  EXPECT_EQ(s->Load().num_free_blocks, 16);
  RankStepPlan p1 = *s->BuildPlan(1, StepType::kDecode);
  EXPECT_EQ(p1.release_slots, std::vector<SeqSlot>{slot});
  EXPECT_TRUE(s->slots_to_release().empty());
}

// Speculative rows: a verification counts in the accepted histogram and its
// verified drafts; a row whose slot the worker had paused (it verified
// nothing) counts as a paused step instead. Both emit their tokens.
TEST(RankSchedulerTest, PausedSpeculativeRowsCountApartFromVerifications) {
  RankSchedulerConfig config = SmallConfig(16);
  config.num_draft_tokens = 3;
  auto s = *RankScheduler::Create(config);
  ASSERT_TRUE(s->Add(MakeRequest(1, 6, 20)).ok());
  RankStepPlan p0 = *s->BuildPlan(0, StepType::kPrefill);
  ASSERT_TRUE(s->OnResult(UniformResult(p0, 5)).ok());
  RankStepPlan p1 = *s->BuildPlan(1, StepType::kDecode);
  ASSERT_EQ(p1.rows.size(), 1u);
  ASSERT_EQ(p1.rows[0].draft_tokens, 3);
  RankStepResult r1{.step_id = p1.step_id};
  r1.rows.push_back({.tokens = {7, 8, 9}, .verified_drafts = 3});  // 2 accepted
  ASSERT_TRUE(s->OnResult(r1).ok());
  RankStepPlan p2 = *s->BuildPlan(2, StepType::kDecode);
  ASSERT_EQ(p2.rows.size(), 1u);
  RankStepResult r2{.step_id = p2.step_id};
  r2.rows.push_back({.tokens = {10}, .drafts_paused = true});
  ASSERT_TRUE(s->OnResult(r2).ok());
  EXPECT_EQ(s->accepted_histogram(), (std::vector<int64_t>{0, 0, 1, 0}));
  EXPECT_EQ(s->verified_drafts(), 3);
  EXPECT_EQ(s->paused_steps(), 1);
  EXPECT_EQ(s->lookup_verifications(), 0);
  // A verification of prompt lookup drafts counts in the histogram and apart.
  RankStepPlan p3 = *s->BuildPlan(3, StepType::kDecode);
  ASSERT_EQ(p3.rows.size(), 1u);
  RankStepResult r3{.step_id = p3.step_id};
  r3.rows.push_back({.tokens = {11, 12, 13, 14}, .verified_drafts = 3, .lookup_drafts = true});
  ASSERT_TRUE(s->OnResult(r3).ok());
  EXPECT_EQ(s->accepted_histogram(), (std::vector<int64_t>{0, 0, 1, 1}));
  EXPECT_EQ(s->verified_drafts(), 6);
  EXPECT_EQ(s->lookup_verifications(), 1);
  EXPECT_EQ(s->lookup_accepted(), 3);
}

TEST(RankSchedulerTest, ChunkedPrefillRespectsTheBudget) {
  auto s = *RankScheduler::Create(SmallConfig(64, /*budget=*/16));
  ASSERT_TRUE(s->Add(MakeRequest(1, 10)).ok());
  ASSERT_TRUE(s->Add(MakeRequest(2, 25)).ok());
  ASSERT_TRUE(s->Add(MakeRequest(3, 7)).ok());
  std::vector<int64_t> next_pos(4, 0);
  int64_t prefilled = 0;
  for (uint64_t step = 0; s->Load().has_prefill_work; ++step) {
    ASSERT_LT(step, 10u);
    RankStepPlan plan = *s->BuildPlan(step, StepType::kPrefill);
    int64_t tokens = 0;
    for (const PlanRow& row : plan.rows) {
      tokens += row.num_tokens();
      const uint64_t id = row.request.value();
      EXPECT_EQ(row.start_pos, next_pos[id]);
      next_pos[id] += row.num_tokens();
      const int64_t prompt = id == 1 ? 10 : id == 2 ? 25 : 7;
      EXPECT_EQ(row.samples, next_pos[id] == prompt);
      // Chunk inputs are the prompt tokens at those positions.
      EXPECT_EQ(row.input_tokens.front(), 100 + 10 * id + row.start_pos);
    }
    EXPECT_LE(tokens, 16);
    prefilled += tokens;
    ASSERT_TRUE(s->OnResult(UniformResult(plan, 5)).ok());
  }
  EXPECT_EQ(prefilled, 42);
  EXPECT_EQ(next_pos[2], 25);
  EXPECT_EQ(s->Load().num_running, 3);
}

// A short request queued behind a long prompt's prefill is admitted in the
// next prefill step with its whole prompt (the long chunk shrinks to make
// room); a long queued prompt gets at most half of the budget.
TEST(RankSchedulerTest, QueuedPromptSharesTheBudgetWithALongPrefill) {
  auto s = *RankScheduler::Create(SmallConfig(512, /*budget=*/16));
  ASSERT_TRUE(s->Add(MakeRequest(1, 60)).ok());
  RankStepPlan first = *s->BuildPlan(0, StepType::kPrefill);
  ASSERT_EQ(first.rows.size(), 1u);
  EXPECT_EQ(first.rows[0].num_tokens(), 16);
  ASSERT_TRUE(s->OnResult(UniformResult(first, 5)).ok());
  ASSERT_TRUE(s->Add(MakeRequest(2, 6)).ok());
  RankStepPlan second = *s->BuildPlan(1, StepType::kPrefill);
  ASSERT_EQ(second.rows.size(), 2u);
  EXPECT_EQ(FindRow(second, 1)->num_tokens(), 10);
  EXPECT_EQ(FindRow(second, 2)->num_tokens(), 6);  // its whole prompt
  EXPECT_TRUE(FindRow(second, 2)->samples);
  ASSERT_TRUE(s->OnResult(UniformResult(second, 5)).ok());
  ASSERT_TRUE(s->Add(MakeRequest(3, 30)).ok());
  RankStepPlan third = *s->BuildPlan(2, StepType::kPrefill);
  ASSERT_EQ(third.rows.size(), 2u);
  EXPECT_EQ(FindRow(third, 1)->num_tokens(), 8);  // half the budget each
  EXPECT_EQ(FindRow(third, 3)->num_tokens(), 8);
}

TEST(RankSchedulerTest, DecodeRemapsWhenTheResultIsLate) {
  auto s = *RankScheduler::Create(SmallConfig(64));
  ASSERT_TRUE(s->Add(MakeRequest(1, 5)).ok());
  ASSERT_TRUE(s->Add(MakeRequest(2, 3)).ok());
  RankStepPlan p0 = *s->BuildPlan(0, StepType::kPrefill);
  ASSERT_EQ(p0.rows.size(), 2u);
  // Zero-overhead: plan 1 before result 0; inputs come from plan 0's rows.
  RankStepPlan p1 = *s->BuildPlan(1, StepType::kDecode);
  ASSERT_EQ(p1.rows.size(), 2u);
  for (const PlanRow& row : p1.rows) {
    EXPECT_TRUE(row.input_tokens.empty());
    EXPECT_EQ(p0.rows[row.remap].request, row.request);
    EXPECT_EQ(row.start_pos, row.request.value() == 1 ? 5 : 3);
  }
  // Two steps in flight: no third plan.
  EXPECT_EQ(s->BuildPlan(2, StepType::kDecode).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s->OnResult(UniformResult(p1, 7)).status().code(),
            absl::StatusCode::kFailedPrecondition);
  RankStepResult short_result = UniformResult(p0, 7);
  short_result.rows.pop_back();
  EXPECT_EQ(s->OnResult(short_result).status().code(), absl::StatusCode::kInvalidArgument);
  ASSERT_EQ(s->OnResult(UniformResult(p0, 7))->size(), 2u);
  ASSERT_TRUE(s->OnResult(UniformResult(p1, 8)).ok());
  // Plain: every input is known.
  RankStepPlan p2 = *s->BuildPlan(2, StepType::kDecode);
  for (const PlanRow& row : p2.rows) {
    EXPECT_EQ(row.remap, -1);
    EXPECT_EQ(row.input_tokens, std::vector<uint32_t>{8});
  }
  EXPECT_EQ(s->BuildPlan(4, StepType::kDecode).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(RankSchedulerTest, DecodeSelectionIsLcfsOverTheBatchLimit) {
  RankSchedulerConfig c = SmallConfig(64, 2048, /*batch=*/2);
  c.max_running = 4;
  auto s = *RankScheduler::Create(c);
  for (uint64_t id = 1; id <= 4; ++id) ASSERT_TRUE(s->Add(MakeRequest(id, 3)).ok());
  RankStepPlan p0 = *s->BuildPlan(0, StepType::kPrefill);
  ASSERT_EQ(p0.rows.size(), 4u);
  ASSERT_TRUE(s->OnResult(UniformResult(p0, 7)).ok());
  RankStepPlan p1 = *s->BuildPlan(1, StepType::kDecode);
  ASSERT_EQ(p1.rows.size(), 2u);
  std::vector<uint64_t> ids = {p1.rows[0].request.value(), p1.rows[1].request.value()};
  std::sort(ids.begin(), ids.end());
  EXPECT_EQ(ids, (std::vector<uint64_t>{3, 4}));
}

}  // namespace
}  // namespace weir::coordinator::scheduler
