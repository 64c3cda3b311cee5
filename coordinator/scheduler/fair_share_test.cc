// coordinator/scheduler/fair_share_test.cc
//
// SeqRequest::tenant: within a priority, the tenant with the fewest admitted
// sequences is admitted first (a flooding tenant cannot starve another), and
// RankSchedulerConfig::max_running_per_tenant caps one tenant.

#include <algorithm>
#include <vector>

#include "coordinator/scheduler/rank_scheduler.h"
#include "coordinator/scheduler/test_util.h"
#include "gtest/gtest.h"

namespace weir::coordinator::scheduler {
namespace {

SeqRequest Of(uint64_t id, const std::string& tenant, int32_t priority = 0, uint32_t max_new = 8) {
  SeqRequest r = MakeRequest(id, 4, max_new);
  r.tenant = tenant;
  r.priority = priority;
  return r;
}

std::vector<uint64_t> Admitted(const RankStepPlan& plan) {
  std::vector<uint64_t> ids;
  for (const PlanRow& row : plan.rows) {
    if (row.start_pos == 0) ids.push_back(row.request.value());
  }
  std::sort(ids.begin(), ids.end());
  return ids;
}

TEST(FairShareTest, AFloodingTenantDoesNotStarveAnother) {
  RankSchedulerConfig c = SmallConfig(32);
  c.max_running = 2;
  auto s = *RankScheduler::Create(c);
  for (uint64_t id = 1; id <= 6; ++id) ASSERT_TRUE(s->Add(Of(id, "flood")).ok());
  ASSERT_TRUE(s->Add(Of(7, "other")).ok());
  // FCFS would admit 1 and 2; the other tenant has none running, so its
  // request takes the second place.
  RankStepPlan plan = *s->BuildPlan(0, StepType::kPrefill);
  EXPECT_EQ(Admitted(plan), (std::vector<uint64_t>{1, 7}));
  ASSERT_TRUE(s->OnResult(UniformResult(plan, 9)).ok());
  EXPECT_EQ(s->Load().num_waiting, 5);
}

TEST(FairShareTest, TiesGoInQueueOrderAndPriorityComesFirst) {
  RankSchedulerConfig c = SmallConfig(32);
  c.max_running = 3;
  auto s = *RankScheduler::Create(c);
  ASSERT_TRUE(s->Add(Of(1, "a")).ok());
  ASSERT_TRUE(s->Add(Of(2, "a")).ok());
  ASSERT_TRUE(s->Add(Of(3, "b")).ok());
  ASSERT_TRUE(s->Add(Of(4, "c")).ok());
  ASSERT_TRUE(s->Add(Of(5, "a", /*priority=*/-1)).ok());
  // 5 is the most urgent; then a, b, c have one each... a has 5 admitted
  // already, so b (3) and c (4) come before a's second.
  RankStepPlan plan = *s->BuildPlan(0, StepType::kPrefill);
  EXPECT_EQ(Admitted(plan), (std::vector<uint64_t>{3, 4, 5}));
}

TEST(FairShareTest, ATenantAtItsLimitWaitsWhileOthersAreAdmitted) {
  RankSchedulerConfig c = SmallConfig(32);
  c.max_running = 4;
  c.max_running_per_tenant = 1;
  auto s = *RankScheduler::Create(c);
  for (uint64_t id = 1; id <= 3; ++id) ASSERT_TRUE(s->Add(Of(id, "flood", 0, 1)).ok());
  ASSERT_TRUE(s->Add(Of(4, "other", 0, 1)).ok());
  RankStepPlan plan = *s->BuildPlan(0, StepType::kPrefill);
  EXPECT_EQ(Admitted(plan), (std::vector<uint64_t>{1, 4}));
  EXPECT_EQ(s->Load().num_waiting, 2);
  // One token each ends them (max_new_tokens 1): the next flood request goes.
  ASSERT_TRUE(s->OnResult(UniformResult(plan, 9)).ok());
  plan = *s->BuildPlan(1, StepType::kPrefill);
  EXPECT_EQ(Admitted(plan), (std::vector<uint64_t>{2}));
  ASSERT_TRUE(s->OnResult(UniformResult(plan, 9)).ok());
  ASSERT_TRUE(s->Add(Of(5, "flood", 0, 8)).ok());
  plan = *s->BuildPlan(2, StepType::kPrefill);
  EXPECT_EQ(Admitted(plan), (std::vector<uint64_t>{3}));
  ASSERT_TRUE(s->OnResult(UniformResult(plan, 9)).ok());
  plan = *s->BuildPlan(3, StepType::kPrefill);
  EXPECT_EQ(Admitted(plan), (std::vector<uint64_t>{5}));
  ASSERT_TRUE(s->OnResult(UniformResult(plan, 9)).ok());
  // Only a capped tenant waits: the rank has no prefill work to vote for.
  ASSERT_TRUE(s->Add(Of(6, "flood", 0, 8)).ok());
  EXPECT_FALSE(s->Load().has_prefill_work);
  plan = *s->BuildPlan(4, StepType::kPrefill);
  EXPECT_TRUE(Admitted(plan).empty());
  EXPECT_TRUE(s->blocks().VerifyAccounting().ok());
}

}  // namespace
}  // namespace weir::coordinator::scheduler
