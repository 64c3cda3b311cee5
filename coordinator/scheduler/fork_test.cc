// coordinator/scheduler/fork_test.cc
//
// Parallel samples (SeqRequest::fork_of) share their prompt's prefill: the
// first prefills all but the last prompt token, then forwards it in the
// step that admits the others as forks of it (PlanRow::fork_from); forks
// that cannot be admitted then, or whose source is gone, prefill alone.

#include <vector>

#include "coordinator/scheduler/rank_scheduler.h"
#include "coordinator/scheduler/test_util.h"
#include "gtest/gtest.h"

namespace weir::coordinator::scheduler {
namespace {

SeqRequest Sample(uint64_t id, uint64_t first, int prompt_len = 6) {
  SeqRequest r = MakeRequest(first, prompt_len, 8);  // the same prompt for all
  r.id = RequestId(id);
  if (id != first) r.fork_of = RequestId(first);
  return r;
}

TEST(ForkTest, SamplesForkOffTheLastPromptToken) {
  auto s = *RankScheduler::Create(SmallConfig(32));
  for (uint64_t id = 1; id <= 3; ++id) ASSERT_TRUE(s->Add(Sample(id, 1)).ok());
  // Step 0: only the first sample, and not its last prompt token.
  RankStepPlan plan = *s->BuildPlan(0, StepType::kPrefill);
  ASSERT_EQ(plan.rows.size(), 1u);
  EXPECT_EQ(plan.rows[0].request, RequestId(1));
  EXPECT_EQ(plan.rows[0].num_tokens(), 5);
  EXPECT_FALSE(plan.rows[0].samples);
  ASSERT_TRUE(s->OnResult(UniformResult(plan, 9)).ok());
  EXPECT_EQ(s->Load().num_waiting, 2);
  // Held for a source that runs: as good as admitted (no queue timeout).
  EXPECT_TRUE(s->WaitsForAdmittedSource(RequestId(2)));
  EXPECT_FALSE(s->WaitsForAdmittedSource(RequestId(1)));

  // Step 1: its last token, and both forks of it.
  plan = *s->BuildPlan(1, StepType::kPrefill);
  ASSERT_EQ(plan.rows.size(), 3u);
  const SeqSlot source = plan.rows[0].slot;
  EXPECT_EQ(plan.rows[0].start_pos, 5);
  EXPECT_TRUE(plan.rows[0].samples);
  EXPECT_FALSE(plan.rows[0].fork_from.has_value());
  for (uint64_t id : {2, 3}) {
    const PlanRow* row = FindRow(plan, id);
    ASSERT_NE(row, nullptr);
    ASSERT_TRUE(row->fork_from.has_value());
    EXPECT_EQ(*row->fork_from, source);
    EXPECT_NE(row->slot, source);
    EXPECT_EQ(row->start_pos, 5);
    EXPECT_EQ(row->input_tokens, std::vector<uint32_t>{plan.rows[0].input_tokens[0]});
    EXPECT_TRUE(row->samples);
    EXPECT_EQ(row->new_blocks.size(), 2u);  // 6 positions, 4 a block
  }
  ASSERT_TRUE(s->OnResult(UniformResult(plan, 9)).ok());
  EXPECT_EQ(s->Load().num_waiting, 0);
  EXPECT_EQ(s->Load().num_running, 3);
  // Then they decode like any other.
  plan = *s->BuildPlan(2, StepType::kDecode);
  EXPECT_EQ(plan.rows.size(), 3u);
  for (const PlanRow& row : plan.rows) EXPECT_EQ(row.start_pos, 6);
  ASSERT_TRUE(s->OnResult(UniformResult(plan, 9)).ok());
  EXPECT_TRUE(s->blocks().VerifyAccounting().ok());
}

TEST(ForkTest, WithoutTheirSourceSamplesPrefillAlone) {
  auto s = *RankScheduler::Create(SmallConfig(32));
  for (uint64_t id = 1; id <= 2; ++id) ASSERT_TRUE(s->Add(Sample(id, 1)).ok());
  RankStepPlan plan = *s->BuildPlan(0, StepType::kPrefill);
  ASSERT_EQ(plan.rows.size(), 1u);
  ASSERT_TRUE(s->OnResult(UniformResult(plan, 9)).ok());
  ASSERT_TRUE(s->Cancel(RequestId(1)).ok());
  EXPECT_FALSE(s->WaitsForAdmittedSource(RequestId(2)));
  plan = *s->BuildPlan(1, StepType::kPrefill);
  const PlanRow* row = FindRow(plan, 2);
  ASSERT_NE(row, nullptr);
  EXPECT_FALSE(row->fork_from.has_value());
  EXPECT_EQ(row->start_pos, 0);
  EXPECT_EQ(row->num_tokens(), 6);
  EXPECT_TRUE(row->samples);
}

TEST(ForkTest, AForkWithoutRoomPrefillsAloneLater) {
  // Room for two sequences (max_running): the source and one fork.
  RankSchedulerConfig c = SmallConfig(32);
  c.max_running = 2;
  auto s = *RankScheduler::Create(c);
  for (uint64_t id = 1; id <= 3; ++id) ASSERT_TRUE(s->Add(Sample(id, 1)).ok());
  RankStepPlan plan = *s->BuildPlan(0, StepType::kPrefill);
  ASSERT_TRUE(s->OnResult(UniformResult(plan, 9)).ok());
  plan = *s->BuildPlan(1, StepType::kPrefill);
  // max_running 2: the source and one fork; the other waits, not held.
  ASSERT_EQ(plan.rows.size(), 2u);
  EXPECT_TRUE(plan.rows[1].fork_from.has_value());
  ASSERT_TRUE(s->OnResult(UniformResult(plan, 9)).ok());
  EXPECT_EQ(s->Load().num_waiting, 1);
  // Once a place frees up, it prefills its whole prompt.
  ASSERT_TRUE(s->Cancel(plan.rows[1].request).ok());
  plan = *s->BuildPlan(2, StepType::kPrefill);
  ASSERT_EQ(plan.rows.size(), 1u);
  EXPECT_FALSE(plan.rows[0].fork_from.has_value());
  EXPECT_EQ(plan.rows[0].start_pos, 0);
  EXPECT_EQ(plan.rows[0].num_tokens(), 6);
}

TEST(ForkTest, OnlyTheSamePromptForksAndNeverAfterTheLastToken) {
  auto s = *RankScheduler::Create(SmallConfig(32));
  ASSERT_TRUE(s->Add(Sample(1, 1)).ok());
  SeqRequest other = MakeRequest(7, 6, 8);  // another prompt
  other.id = RequestId(2);
  other.fork_of = RequestId(1);
  ASSERT_TRUE(s->Add(other).ok());
  RankStepPlan plan = *s->BuildPlan(0, StepType::kPrefill);
  // Not held: both prefill (the first all of its prompt: no fork waits).
  ASSERT_EQ(plan.rows.size(), 2u);
  EXPECT_EQ(plan.rows[0].num_tokens(), 6);
  EXPECT_FALSE(plan.rows[1].fork_from.has_value());
  ASSERT_TRUE(s->OnResult(UniformResult(plan, 9)).ok());
  // The first is past its prompt: a late sample of it prefills alone.
  ASSERT_TRUE(s->Add(Sample(3, 1)).ok());
  plan = *s->BuildPlan(1, StepType::kPrefill);
  const PlanRow* row = FindRow(plan, 3);
  ASSERT_NE(row, nullptr);
  EXPECT_EQ(row->start_pos, 0);
  EXPECT_FALSE(row->fork_from.has_value());
}

}  // namespace
}  // namespace weir::coordinator::scheduler
