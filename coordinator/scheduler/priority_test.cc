// coordinator/scheduler/priority_test.cc
//
// SeqRequest::priority (lower is more urgent): the waiting queue's order
// (FCFS within a priority, a preempted sequence back at the head of its
// own), the decode batch kept when over the limit, and the preemption victim.

#include <vector>

#include "coordinator/scheduler/rank_scheduler.h"
#include "coordinator/scheduler/test_util.h"
#include "gtest/gtest.h"

namespace weir::coordinator::scheduler {
namespace {

SeqRequest Urgency(uint64_t id, int32_t priority, int prompt_len = 4, uint32_t max_new = 16) {
  SeqRequest r = MakeRequest(id, prompt_len, max_new);
  r.priority = priority;
  return r;
}

RankStepPlan PlanAndApply(RankScheduler& s, uint64_t step, StepType type, uint32_t token = 7) {
  RankStepPlan plan = *s.BuildPlan(step, type);
  EXPECT_TRUE(s.OnResult(UniformResult(plan, token)).ok());
  return plan;
}

TEST(PriorityTest, TheQueueRunsByPriorityThenArrival) {
  // One sequence at a time, each done after its first token: the prefill
  // steps show the admission order.
  RankSchedulerConfig c = SmallConfig(8);
  c.max_running = 1;
  auto s = *RankScheduler::Create(c);
  ASSERT_TRUE(s->Add(Urgency(1, 5, 4, 1)).ok());
  ASSERT_TRUE(s->Add(Urgency(2, 0, 4, 1)).ok());
  ASSERT_TRUE(s->Add(Urgency(3, 5, 4, 1)).ok());
  ASSERT_TRUE(s->Add(Urgency(4, -1, 4, 1)).ok());
  ASSERT_TRUE(s->Add(Urgency(5, 0, 4, 1)).ok());
  std::vector<uint64_t> order;
  for (uint64_t step = 0; step < 5; ++step) {
    RankStepPlan plan = PlanAndApply(*s, step, StepType::kPrefill);
    ASSERT_EQ(plan.rows.size(), 1u) << "step " << step;
    order.push_back(plan.rows[0].request.value());
  }
  EXPECT_EQ(order, (std::vector<uint64_t>{4, 2, 5, 1, 3}));
  EXPECT_EQ(s->num_live(), 0);
}

TEST(PriorityTest, PreemptionTakesTheLeastUrgentFirst) {
  // Three 4-token prompts (1 block each); 6 blocks let each grow to 8 tokens.
  // With equal priorities request 3 (the latest) would go
  // (PreemptionTest.EqualOutputsPreemptTheLatestArrival); request 1 is the
  // least urgent here.
  auto s = *RankScheduler::Create(SmallConfig(6));
  ASSERT_TRUE(s->Add(Urgency(1, 9)).ok());
  ASSERT_TRUE(s->Add(Urgency(2, 0)).ok());
  ASSERT_TRUE(s->Add(Urgency(3, 0)).ok());
  uint64_t step = 0;
  PlanAndApply(*s, step++, StepType::kPrefill);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(PlanAndApply(*s, step++, StepType::kDecode).rows.size(), 3u);
  }
  RankStepPlan plan = PlanAndApply(*s, step++, StepType::kDecode);
  EXPECT_EQ(s->num_preemptions(), 1);
  ASSERT_EQ(plan.rows.size(), 2u);
  EXPECT_EQ(FindRow(plan, 1), nullptr);
  EXPECT_NE(FindRow(plan, 3), nullptr);
  EXPECT_EQ(s->blocks().Find(RequestId(1)), nullptr);

  // A newcomer of the victim's priority queues behind it; a more urgent one
  // goes ahead of it.
  ASSERT_TRUE(s->Add(Urgency(4, 9)).ok());
  ASSERT_TRUE(s->Add(Urgency(5, 1)).ok());
  EXPECT_EQ(s->Load().num_waiting, 3);
  ASSERT_TRUE(s->Cancel(RequestId(2)).ok());
  ASSERT_TRUE(s->Cancel(RequestId(3)).ok());
  std::vector<uint64_t> admitted;
  for (int i = 0; i < 3 && admitted.size() < 3; ++i) {
    RankStepPlan prefill = PlanAndApply(*s, step++, StepType::kPrefill);
    for (const PlanRow& row : prefill.rows) admitted.push_back(row.request.value());
  }
  EXPECT_EQ(admitted, (std::vector<uint64_t>{5, 1, 4}));
  EXPECT_TRUE(s->blocks().VerifyAccounting().ok());
}

TEST(PriorityTest, AFullDecodeBatchKeepsTheMostUrgent) {
  // Batch limit 1: LCFS alone would decode request 2 (the later one).
  RankSchedulerConfig c = SmallConfig(8, 2048, /*batch=*/1);
  c.max_running = 2;
  auto s = *RankScheduler::Create(c);
  ASSERT_TRUE(s->Add(Urgency(1, -3)).ok());
  ASSERT_TRUE(s->Add(Urgency(2, 0)).ok());
  uint64_t step = 0;
  PlanAndApply(*s, step++, StepType::kPrefill);
  for (int i = 0; i < 3; ++i) {
    RankStepPlan plan = PlanAndApply(*s, step++, StepType::kDecode);
    ASSERT_EQ(plan.rows.size(), 1u);
    EXPECT_EQ(plan.rows[0].request, RequestId(1));
  }
}

}  // namespace
}  // namespace weir::coordinator::scheduler
