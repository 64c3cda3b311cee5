// coordinator/scheduler/finish_test.cc
//
// Stop conditions, cancellation, and the zero-overhead finish rule: a
// sequence that finished at step t may still be in plan t+1 (its output is
// discarded), is dropped from plan t+2, and its KV is released only after
// step t+1 has returned.

#include <vector>

#include "coordinator/scheduler/rank_scheduler.h"
#include "coordinator/scheduler/test_util.h"
#include "gtest/gtest.h"

namespace weir::coordinator::scheduler {
namespace {

// Runs one request alone in plain stepping, every sampled token being
// `tokens[i]` (the last one repeated); returns its output and finish reason.
std::vector<uint32_t> RunAlone(const RankSchedulerConfig& config, SeqRequest request,
                               const std::vector<uint32_t>& tokens, FinishReason* reason) {
  auto s = *RankScheduler::Create(config);
  EXPECT_TRUE(s->Add(std::move(request)).ok());
  std::vector<uint32_t> out;
  *reason = FinishReason::kNone;
  for (uint64_t step = 0; s->num_live() > 0 && step < 100; ++step) {
    const StepType type = s->Load().has_decode_work ? StepType::kDecode : StepType::kPrefill;
    RankStepPlan plan = *s->BuildPlan(step, type);
    const uint32_t token = tokens[std::min(out.size(), tokens.size() - 1)];
    const std::vector<SeqUpdate> updates = *s->OnResult(UniformResult(plan, token));
    for (const SeqUpdate& u : updates) {
      out.insert(out.end(), u.new_tokens.begin(), u.new_tokens.end());
      if (u.finish != FinishReason::kNone) *reason = u.finish;
    }
  }
  EXPECT_EQ(s->blocks().num_free_blocks(), s->blocks().num_blocks());
  return out;
}

TEST(FinishTest, StopConditions) {
  const RankSchedulerConfig c = SmallConfig(32);
  FinishReason reason;
  EXPECT_EQ(RunAlone(c, MakeRequest(1, 4, 5), {9}, &reason).size(), 5u);
  EXPECT_EQ(reason, FinishReason::kMaxTokens);

  EXPECT_EQ(RunAlone(c, MakeRequest(1, 4), {9, 9, 0}, &reason), (std::vector<uint32_t>{9, 9, 0}));
  EXPECT_EQ(reason, FinishReason::kEos);

  SeqRequest ignore = MakeRequest(1, 4, 6);
  ignore.ignore_eos = true;
  EXPECT_EQ(RunAlone(c, ignore, {0}, &reason).size(), 6u);
  EXPECT_EQ(reason, FinishReason::kMaxTokens);

  SeqRequest min_new = MakeRequest(1, 4);
  min_new.min_new_tokens = 3;
  EXPECT_EQ(RunAlone(c, min_new, {0}, &reason).size(), 3u);
  EXPECT_EQ(reason, FinishReason::kEos);

  SeqRequest stop = MakeRequest(1, 4);
  stop.stop_token_ids = {77};
  EXPECT_EQ(RunAlone(c, stop, {5, 77}, &reason), (std::vector<uint32_t>{5, 77}));
  EXPECT_EQ(reason, FinishReason::kStopToken);

  // 60-token prompt, max_model_len 64: four tokens fit.
  EXPECT_EQ(RunAlone(c, MakeRequest(1, 60), {9}, &reason).size(), 4u);
  EXPECT_EQ(reason, FinishReason::kContextLimit);
}

TEST(FinishTest, WorkerFlagEndsTheSequence) {
  auto s = *RankScheduler::Create(SmallConfig(32));
  ASSERT_TRUE(s->Add(MakeRequest(1, 4)).ok());
  RankStepPlan plan = *s->BuildPlan(0, StepType::kPrefill);
  RankStepResult result = UniformResult(plan, 9);
  result.rows[0].finished = true;
  std::vector<SeqUpdate> updates = *s->OnResult(result);
  ASSERT_EQ(updates.size(), 1u);
  EXPECT_EQ(updates[0].finish, FinishReason::kWorkerEnded);
  EXPECT_EQ(s->num_live(), 0);
}

TEST(FinishTest, ZeroOverheadFinishRule) {
  auto s = *RankScheduler::Create(SmallConfig(32));
  ASSERT_TRUE(s->Add(MakeRequest(1, 4)).ok());
  ASSERT_TRUE(s->Add(MakeRequest(2, 4)).ok());
  RankStepPlan p0 = *s->BuildPlan(0, StepType::kPrefill);
  RankStepPlan p1 = *s->BuildPlan(1, StepType::kDecode);
  ASSERT_TRUE(s->OnResult(UniformResult(p0, 9)).ok());
  RankStepPlan p2 = *s->BuildPlan(2, StepType::kDecode);
  // Result 1: request 1 samples EOS, request 2 goes on.
  RankStepResult r1 = UniformResult(p1, 9);
  r1.rows[FindRow(p1, 1) - p1.rows.data()].tokens = {0};
  const int64_t free_before = s->blocks().num_free_blocks();
  const SeqSlot slot1 = FindRow(p2, 1)->slot;
  std::vector<SeqUpdate> u1 = *s->OnResult(r1);
  ASSERT_EQ(u1.size(), 2u);
  EXPECT_EQ(u1[0].request, RequestId(1));  // row order
  EXPECT_EQ(u1[0].finish, FinishReason::kEos);
  // Plan 2 already holds request 1: its KV stays reserved until step 2 returns.
  ASSERT_NE(FindRow(p2, 1), nullptr);
  EXPECT_EQ(s->blocks().num_free_blocks(), free_before);
  EXPECT_EQ(s->blocks().num_pending_release_blocks(), 2);
  RankStepPlan p3 = *s->BuildPlan(3, StepType::kDecode);
  EXPECT_EQ(FindRow(p3, 1), nullptr);  // dropped from t+2
  EXPECT_EQ(p3.release_slots, std::vector<SeqSlot>{slot1});
  std::vector<SeqUpdate> u2 = *s->OnResult(UniformResult(p2, 9));
  ASSERT_EQ(u2.size(), 1u);  // request 1's output at t+1 is discarded
  EXPECT_EQ(u2[0].request, RequestId(2));
  EXPECT_EQ(s->blocks().num_free_blocks(), free_before + 2);
  EXPECT_TRUE(s->blocks().VerifyAccounting().ok());
}

TEST(FinishTest, KnownLengthEndIsNotPlannedAhead) {
  auto s = *RankScheduler::Create(SmallConfig(32));
  ASSERT_TRUE(s->Add(MakeRequest(1, 4, /*max_new=*/1)).ok());
  RankStepPlan p0 = *s->BuildPlan(0, StepType::kPrefill);
  RankStepPlan p1 = *s->BuildPlan(1, StepType::kDecode);
  EXPECT_TRUE(p1.rows.empty());  // its only token is in flight
  std::vector<SeqUpdate> u = *s->OnResult(UniformResult(p0, 9));
  ASSERT_EQ(u.size(), 1u);
  EXPECT_EQ(u[0].finish, FinishReason::kMaxTokens);
  EXPECT_EQ(s->blocks().num_free_blocks(), 32);  // step 0 was its last
}

TEST(FinishTest, CancelDiscardsInFlightOutputAndReleasesAfterTheStep) {
  auto s = *RankScheduler::Create(SmallConfig(32));
  ASSERT_TRUE(s->Add(MakeRequest(1, 4)).ok());
  ASSERT_TRUE(s->Add(MakeRequest(2, 4)).ok());
  ASSERT_TRUE(s->Add(MakeRequest(3, 4)).ok());
  RankStepPlan p0 = *s->BuildPlan(0, StepType::kPrefill);
  ASSERT_TRUE(s->Cancel(RequestId(1)).ok());
  EXPECT_EQ(s->blocks().num_free_blocks(), 29);  // step 0 still runs
  EXPECT_EQ(s->Cancel(RequestId(1)).code(), absl::StatusCode::kNotFound);
  std::vector<SeqUpdate> u = *s->OnResult(UniformResult(p0, 9));
  EXPECT_EQ(u.size(), 2u);
  EXPECT_EQ(s->blocks().num_free_blocks(), 30);
  ASSERT_TRUE(s->Add(MakeRequest(4, 4)).ok());
  ASSERT_TRUE(s->Cancel(RequestId(4)).ok());  // still waiting: nothing held
  RankStepPlan p1 = *s->BuildPlan(1, StepType::kDecode);
  EXPECT_EQ(p1.release_slots.size(), 1u);
  EXPECT_EQ(p1.rows.size(), 2u);
  EXPECT_EQ(s->Load().num_waiting, 0);
}

}  // namespace
}  // namespace weir::coordinator::scheduler
