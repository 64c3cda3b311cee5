// coordinator/scheduler/step_type_policy_test.cc

#include "coordinator/scheduler/step_type_policy.h"

#include <vector>

#include "gtest/gtest.h"

namespace weir::coordinator::scheduler {
namespace {

RankLoad Rank(bool prefill, bool decode) {
  RankLoad r;
  r.has_prefill_work = prefill;
  r.has_decode_work = decode;
  return r;
}

// Runs decode steps until the policy picks prefill; returns how many ran.
int DecodesUntilPrefill(StepTypePolicy& policy, const std::vector<RankLoad>& ranks, int limit) {
  for (int i = 0; i < limit; ++i) {
    if (policy.Decide(ranks) == StepType::kPrefill) return i;
  }
  return limit;
}

TEST(StepTypePolicyTest, PrefillsWheneverNoRankDecodes) {
  StepTypePolicy policy = *StepTypePolicy::Create({});
  EXPECT_EQ(policy.Decide({Rank(true, false), Rank(false, false)}), StepType::kPrefill);
  EXPECT_EQ(policy.Decide({Rank(true, false), Rank(false, false)}), StepType::kPrefill);
  EXPECT_EQ(policy.Decide({Rank(false, false), Rank(false, false)}), StepType::kDecode);
  EXPECT_EQ(policy.decode_steps_since_prefill(), 0);  // idle steps do not count
}

TEST(StepTypePolicyTest, AllPointNeedsEveryRank) {
  StepTypePolicy policy = *StepTypePolicy::Create({});
  const std::vector<RankLoad> all = {Rank(true, true), Rank(true, true)};
  // The first ALL point is after 70 decode steps.
  EXPECT_EQ(DecodesUntilPrefill(policy, all, 1000), 70);
  EXPECT_EQ(policy.decode_steps_since_prefill(), 0);
  EXPECT_EQ(DecodesUntilPrefill(policy, all, 1000), 70);
}

TEST(StepTypePolicyTest, AnyPointServesAnIsolatedRank) {
  StepTypePolicy policy = *StepTypePolicy::Create({});
  const std::vector<RankLoad> one = {Rank(true, true), Rank(false, true)};
  // Point 70 is an ALL point and fails; point 100 is an ANY point.
  EXPECT_EQ(DecodesUntilPrefill(policy, one, 1000), 100);
}

TEST(StepTypePolicyTest, ProgressAfterAFailedAllPoint) {
  StepTypePolicy policy = *StepTypePolicy::Create({});
  const std::vector<RankLoad> one = {Rank(true, true), Rank(false, true)};
  const std::vector<RankLoad> all = {Rank(true, true), Rank(true, true)};
  EXPECT_EQ(DecodesUntilPrefill(policy, one, 75), 75);  // past the failed ALL point 70
  // Every rank has work now, but the next ALL point is 140 and ANY is 100.
  EXPECT_EQ(DecodesUntilPrefill(policy, all, 1000), 25);
}

TEST(StepTypePolicyTest, FlagsTurnPointsOff) {
  StepTypePolicyConfig no_any;
  no_any.enable_any_attempts = false;
  StepTypePolicy policy = *StepTypePolicy::Create(no_any);
  const std::vector<RankLoad> one = {Rank(true, true), Rank(false, true)};
  EXPECT_EQ(DecodesUntilPrefill(policy, one, 500), 500);  // isolated rank never served

  StepTypePolicyConfig no_all;
  no_all.enable_all_attempts = false;
  no_all.prefill_any_attempt_interval = 30;
  policy = *StepTypePolicy::Create(no_all);
  const std::vector<RankLoad> all = {Rank(true, true), Rank(true, true)};
  EXPECT_EQ(DecodesUntilPrefill(policy, all, 500), 30);

  StepTypePolicyConfig bad;
  bad.prefill_attempt_interval = 0;
  EXPECT_FALSE(StepTypePolicy::Create(bad).ok());
  bad.enable_all_attempts = false;
  EXPECT_TRUE(StepTypePolicy::Create(bad).ok());
}

TEST(StepTypePolicyTest, NoPrefillWorkKeepsDecoding) {
  StepTypePolicy policy = *StepTypePolicy::Create({});
  const std::vector<RankLoad> none = {Rank(false, true), Rank(false, true)};
  EXPECT_EQ(DecodesUntilPrefill(policy, none, 300), 300);
  EXPECT_EQ(policy.decode_steps_since_prefill(), 300);
}

}  // namespace
}  // namespace weir::coordinator::scheduler
