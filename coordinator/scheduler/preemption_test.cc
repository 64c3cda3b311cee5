// coordinator/scheduler/preemption_test.cc
//
// Victim choice when blocks run out: the running sequence with the shortest
// output so far, the latest arrival on ties (LCFS); recompute of the victim.

#include <vector>

#include "coordinator/scheduler/rank_scheduler.h"
#include "coordinator/scheduler/test_util.h"
#include "gtest/gtest.h"

namespace weir::coordinator::scheduler {
namespace {

// Plain stepping: plan, then apply a result sampling `token` on every row.
RankStepPlan PlanAndApply(RankScheduler& s, uint64_t step, StepType type, uint32_t token = 7) {
  RankStepPlan plan = *s.BuildPlan(step, type);
  EXPECT_TRUE(s.OnResult(UniformResult(plan, token)).ok());
  return plan;
}

TEST(PreemptionTest, EqualOutputsPreemptTheLatestArrival) {
  // Three 4-token prompts (1 block each); 6 blocks let each grow to 8 tokens.
  auto s = *RankScheduler::Create(SmallConfig(6));
  for (uint64_t id = 1; id <= 3; ++id) ASSERT_TRUE(s->Add(MakeRequest(id, 4)).ok());
  uint64_t step = 0;
  PlanAndApply(*s, step++, StepType::kPrefill);
  for (int i = 0; i < 4; ++i) {  // positions 4..7
    EXPECT_EQ(PlanAndApply(*s, step++, StepType::kDecode).rows.size(), 3u);
  }
  EXPECT_EQ(s->blocks().num_free_blocks(), 0);
  const SeqSlot victim_slot = s->blocks().Find(RequestId(3))->slot;
  // Position 8 needs a third block for everyone: request 3 goes.
  RankStepPlan plan = PlanAndApply(*s, step++, StepType::kDecode);
  EXPECT_EQ(s->num_preemptions(), 1);
  ASSERT_EQ(plan.rows.size(), 2u);
  EXPECT_EQ(FindRow(plan, 3), nullptr);
  EXPECT_EQ(plan.release_slots, std::vector<SeqSlot>{victim_slot});
  EXPECT_EQ(s->Load().num_waiting, 1);
  EXPECT_EQ(s->blocks().Find(RequestId(3)), nullptr);
  EXPECT_TRUE(s->blocks().VerifyAccounting().ok());
}

TEST(PreemptionTest, ShortestOutputBeatsArrivalOrder) {
  // Batch limit 1: LCFS decodes only request 2, so request 1 (earlier) keeps
  // the shortest output and is the victim when request 2 needs a block.
  RankSchedulerConfig c = SmallConfig(3, 2048, /*batch=*/1);
  c.max_running = 2;
  auto s = *RankScheduler::Create(c);
  ASSERT_TRUE(s->Add(MakeRequest(1, 4, 8)).ok());
  ASSERT_TRUE(s->Add(MakeRequest(2, 4, 8)).ok());
  uint64_t step = 0;
  PlanAndApply(*s, step++, StepType::kPrefill);
  for (int i = 0; i < 4; ++i) {  // request 2 writes positions 4..7
    RankStepPlan plan = PlanAndApply(*s, step++, StepType::kDecode);
    ASSERT_EQ(plan.rows.size(), 1u);
    EXPECT_EQ(plan.rows[0].request, RequestId(2));
  }
  RankStepPlan plan = PlanAndApply(*s, step++, StepType::kDecode);
  EXPECT_EQ(s->num_preemptions(), 1);
  ASSERT_EQ(plan.rows.size(), 1u);
  EXPECT_EQ(plan.rows[0].request, RequestId(2));
  EXPECT_EQ(plan.rows[0].start_pos, 8);
  EXPECT_EQ(s->blocks().Find(RequestId(1)), nullptr);
}

TEST(PreemptionTest, RecomputeReplaysPromptAndOutputInANewEpoch) {
  auto s = *RankScheduler::Create(SmallConfig(6));
  ASSERT_TRUE(s->Add(MakeRequest(1, 4, 6)).ok());
  ASSERT_TRUE(s->Add(MakeRequest(2, 4, 6)).ok());
  ASSERT_TRUE(s->Add(MakeRequest(3, 4)).ok());
  uint64_t step = 0;
  PlanAndApply(*s, step++, StepType::kPrefill, 40);
  for (int i = 0; i < 5; ++i) PlanAndApply(*s, step++, StepType::kDecode, 41 + i);
  // Request 3 was preempted after 5 outputs (40..44); 1 and 2 then ended
  // with their 6th token.
  ASSERT_EQ(s->num_preemptions(), 1);
  EXPECT_EQ(s->Load().num_running, 0);
  ASSERT_TRUE(s->Load().has_prefill_work);
  RankStepPlan plan = *s->BuildPlan(step++, StepType::kPrefill);
  const PlanRow* row = FindRow(plan, 3);
  ASSERT_NE(row, nullptr);
  EXPECT_EQ(row->reset_epoch, 1u);
  EXPECT_EQ(row->start_pos, 0);
  EXPECT_EQ(row->input_tokens, (std::vector<uint32_t>{130, 131, 132, 133, 40, 41, 42, 43, 44}));
  EXPECT_TRUE(row->samples);
  EXPECT_EQ(row->new_blocks.size(), 3u);
}

TEST(PreemptionTest, APrefillingSequenceCanBeTheVictim) {
  // Request 2 is still prefilling (budget 6) and holds 3 blocks; when
  // request 1 needs its third block, request 2 (no output yet) goes.
  auto s = *RankScheduler::Create(SmallConfig(5, /*budget=*/6));
  ASSERT_TRUE(s->Add(MakeRequest(1, 4)).ok());
  ASSERT_TRUE(s->Add(MakeRequest(2, 12, 8)).ok());
  uint64_t step = 0;
  PlanAndApply(*s, step++, StepType::kPrefill);
  EXPECT_EQ(s->Load().num_prefilling, 1);
  for (int i = 0; i < 4; ++i) PlanAndApply(*s, step++, StepType::kDecode);  // positions 4..7
  EXPECT_EQ(s->num_preemptions(), 0);
  RankStepPlan plan = PlanAndApply(*s, step++, StepType::kDecode);
  EXPECT_EQ(s->num_preemptions(), 1);
  ASSERT_EQ(plan.rows.size(), 1u);
  EXPECT_EQ(plan.rows[0].request, RequestId(1));
  EXPECT_EQ(s->Load().num_prefilling, 0);
  EXPECT_EQ(s->Load().num_waiting, 1);
}

TEST(PreemptionTest, LoneSequenceThatCannotGrowPreemptsItself) {
  // Two sequences, one preempted first; the survivor always fits alone.
  auto s = *RankScheduler::Create(SmallConfig(4));
  ASSERT_TRUE(s->Add(MakeRequest(1, 4, 12)).ok());
  ASSERT_TRUE(s->Add(MakeRequest(2, 4, 12)).ok());
  uint64_t step = 0;
  for (int i = 0; i < 200 && s->num_live() > 0; ++i) {
    const RankLoad load = s->Load();
    PlanAndApply(*s, step++, load.has_decode_work ? StepType::kDecode : StepType::kPrefill);
    ASSERT_TRUE(s->blocks().VerifyAccounting().ok());
  }
  EXPECT_EQ(s->num_live(), 0);
  EXPECT_GE(s->num_preemptions(), 1);
  EXPECT_EQ(s->blocks().num_free_blocks(), 4);
}

}  // namespace
}  // namespace weir::coordinator::scheduler
