#include "worker/verify_length.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"

namespace weir::worker {
namespace {

// Step cost a + b * positions at batch 1 and 4x that at batch 8; drafting
// costs `draft` a row.
VerifyCostCurve Linear(double a, double b, double draft, int max_drafts) {
  VerifyCostCurve curve{.measured_on = "test", .backend = "cpu", .model = "none"};
  for (int64_t batch : {1, 8}) {
    VerifyCostCurve::Point p{.batch = batch, .draft_ms = draft};
    for (int length = 1; length <= max_drafts + 1; ++length) {
      p.step_ms.push_back((batch == 1 ? 1 : 4) * (a + b * length));
    }
    curve.points.push_back(std::move(p));
  }
  return curve;
}

TEST(VerifyLengthTest, ExpectedTokensIsOnePlusSurvivalSum) {
  const std::vector<float> conf = {0.0f, std::log(3.0f)};  // sigmoids 0.5, 0.75
  EXPECT_DOUBLE_EQ(ExpectedTokens(conf, 0), 1.0);
  EXPECT_DOUBLE_EQ(ExpectedTokens(conf, 1), 1.5);
  EXPECT_NEAR(ExpectedTokens(conf, 2), 1.5 + 0.375, 1e-6);
}

TEST(VerifyLengthTest, ConfidentDraftsOnACheapCurveVerifyAll) {
  const VerifyCostCurve curve = Linear(10, 0.1, 0, 5);
  const std::vector<float> sure(5, 8.0f);
  EXPECT_EQ(ChooseVerifyLength(sure, 5, curve, 1), 5);
  EXPECT_EQ(ChooseVerifyLength(sure, 3, curve, 1), 3);  // the row's slot caps it
  EXPECT_EQ(ChooseVerifyLength(std::span(sure).first(2), 5, curve, 1), 2);
}

TEST(VerifyLengthTest, UnlikelyDraftsOrExpensivePositionsVerifyNone) {
  const std::vector<float> unlikely(5, -6.0f);
  EXPECT_EQ(ChooseVerifyLength(unlikely, 5, Linear(10, 0.1, 0, 5), 1), 0);
  // Each position costs as much as a whole step: no draft pays for itself
  // unless it is nearly certain.
  const std::vector<float> even(5, 0.0f);
  EXPECT_EQ(ChooseVerifyLength(even, 5, Linear(0.01, 10, 0, 5), 1), 0);
}

TEST(VerifyLengthTest, StopsWhereSurvivalDrops) {
  // 0.98, 0.98, then 0.05: the third draft adds ~0.05 tokens for a 10% cost.
  const std::vector<float> conf = {4.0f, 4.0f, -3.0f, 4.0f, 4.0f};
  EXPECT_EQ(ChooseVerifyLength(conf, 5, Linear(10, 1, 0, 5), 1), 2);
}

TEST(VerifyLengthTest, StepCostInterpolatesBatchAndAddsDrafting) {
  const VerifyCostCurve curve = Linear(10, 1, 2, 2);
  EXPECT_DOUBLE_EQ(curve.StepCost(1, 0), 11 + 2);
  EXPECT_DOUBLE_EQ(curve.StepCost(8, 2), 4 * 13 + 16);
  EXPECT_DOUBLE_EQ(curve.StepCost(64, 2), 4 * 13 + 16);  // beyond the last point
  const double mid = curve.StepCost(4, 1);
  EXPECT_GT(mid, curve.StepCost(1, 1));
  EXPECT_LT(mid, curve.StepCost(8, 1));
}

TEST(VerifyLengthTest, PlainStepCostHasNoDrafting) {
  const VerifyCostCurve curve = Linear(10, 1, 2, 2);
  EXPECT_DOUBLE_EQ(curve.PlainStepCost(1), 11);
  EXPECT_DOUBLE_EQ(curve.PlainStepCost(8), 44);
  EXPECT_DOUBLE_EQ(curve.PlainStepCost(0), 11);
  EXPECT_DOUBLE_EQ(curve.PlainStepCost(100), 44);
  EXPECT_DOUBLE_EQ(curve.PlainStepCost(4), 11 + 3.0 / 7.0 * 33);
}

TEST(VerifyLengthTest, SpeculationPaysWhenTokensOutrunTheCost) {
  // Batch 1: plain 11 ms; verifying k drafts 11 + k plus a 2 ms draft.
  const VerifyCostCurve curve = Linear(10, 1, 2, 5);
  // k = 2: 15 ms, so 15 / 11 = 1.364 tokens break even.
  EXPECT_TRUE(SpeculationPays(1.37, 2, curve, 1));
  EXPECT_FALSE(SpeculationPays(1.36, 2, curve, 1));
  // Verifying nothing never pays for the draft pass.
  EXPECT_FALSE(SpeculationPays(1.0, 0, curve, 1));
  // Fractional lengths interpolate: k = 1.5 costs 14.5 ms.
  EXPECT_TRUE(SpeculationPays(14.5 / 11 + 1e-9, 1.5, curve, 1));
  EXPECT_FALSE(SpeculationPays(14.5 / 11 - 1e-9, 1.5, curve, 1));
  // Past the curve's lengths: its last one.
  EXPECT_EQ(SpeculationPays(1.5, 9, curve, 1), SpeculationPays(1.5, 5, curve, 1));
  // Batch 8: drafting costs 16 ms of a 4 x (10 + 1 + k) step, plain 44.
  EXPECT_FALSE(SpeculationPays(1.5, 2, curve, 8));  // 1.5 / 68 < 1 / 44
  EXPECT_TRUE(SpeculationPays(1.6, 2, curve, 8));   // 1.6 / 68 > 1 / 44
  EXPECT_TRUE(SpeculationPays(1.5, 2, curve, 1));
}

TEST(VerifyLengthTest, PacerPausesRowsWhoseDraftsDoNotPayAndBacksOff) {
  const VerifyCostCurve curve = Linear(10, 1, 2, 5);
  DraftPacer pacer;
  EXPECT_TRUE(pacer.ShouldDraft());
  // Two poor verifications: not yet judged.
  pacer.Observe(2, 0, curve, 1);
  pacer.Observe(2, 0, curve, 1);
  EXPECT_FALSE(pacer.paused());
  EXPECT_TRUE(pacer.ShouldDraft());
  pacer.Observe(2, 0, curve, 1);  // the third: 1 token a 15 ms step
  EXPECT_TRUE(pacer.paused());
  int64_t paused = 0;
  while (!pacer.ShouldDraft()) ++paused;
  EXPECT_EQ(paused, DraftPacer::kFirstPause);
  EXPECT_EQ(pacer.mean_tokens(), 0);  // resumed afresh
  // Still poor: paused twice as long, then four times.
  for (int64_t want : {2 * DraftPacer::kFirstPause, 4 * DraftPacer::kFirstPause}) {
    for (int i = 0; i < DraftPacer::kProbe; ++i) pacer.Observe(3, 0, curve, 1);
    paused = 0;
    while (!pacer.ShouldDraft()) ++paused;
    EXPECT_EQ(paused, want);
  }
  // Drafts that pay (3 tokens for 16 ms against 11): drafting goes on, and a
  // later pause starts short again.
  for (int i = 0; i < 10; ++i) {
    pacer.Observe(3, 2, curve, 1);
    EXPECT_FALSE(pacer.paused()) << i;
    EXPECT_TRUE(pacer.ShouldDraft());
  }
  EXPECT_NEAR(pacer.mean_tokens(), 3, 1e-12);
  EXPECT_NEAR(pacer.mean_verified(), 3, 1e-12);
  // Plain verifications: the means decay toward 1 token and 0 drafts until
  // they no longer pay (1 + 2 x 0.75^n tokens for 3 x 0.75^n drafts).
  int observed = 0;
  while (!pacer.paused() && observed < 20) {
    pacer.Observe(0, 0, curve, 1);
    ++observed;
  }
  EXPECT_GT(observed, 1);
  EXPECT_LT(observed, 20);
  // A verification seen while paused (none should come) changes no pause.
  pacer.Observe(0, 0, curve, 1);
  paused = 0;
  while (!pacer.ShouldDraft()) ++paused;
  EXPECT_EQ(paused, DraftPacer::kFirstPause);
  // The pause never grows past kMaxPause.
  for (int round = 0; round < 10; ++round) {
    for (int i = 0; i < DraftPacer::kProbe; ++i) pacer.Observe(0, 0, curve, 1);
    paused = 0;
    while (!pacer.ShouldDraft()) ++paused;
    EXPECT_LE(paused, DraftPacer::kMaxPause);
  }
  EXPECT_EQ(paused, DraftPacer::kMaxPause);
}

TEST(VerifyLengthTest, PacerWeighsRecentVerifications) {
  const VerifyCostCurve curve = Linear(10, 1, 2, 5);
  DraftPacer pacer;
  pacer.Observe(4, 4, curve, 1);  // 5 tokens
  pacer.Observe(0, 0, curve, 1);  // 1 token: 5 + (1 - 5) / 4 = 4
  EXPECT_DOUBLE_EQ(pacer.mean_tokens(), 4);
  EXPECT_DOUBLE_EQ(pacer.mean_verified(), 3);
}

TEST(VerifyLengthTest, JsonRoundTrip) {
  const VerifyCostCurve curve = Linear(10, 1, 2.5, 3);
  absl::StatusOr<VerifyCostCurve> back = ParseVerifyCostCurve(VerifyCostCurveToJson(curve));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->measured_on, "test");
  EXPECT_EQ(back->backend, "cpu");
  ASSERT_EQ(back->points.size(), 2u);
  EXPECT_EQ(back->points[1].batch, 8);
  EXPECT_EQ(back->points[1].step_ms, curve.points[1].step_ms);
  EXPECT_EQ(back->max_drafts(), 3);
}

TEST(VerifyLengthTest, RejectsBadCurves) {
  for (const char* bad : {
           "not json",
           "{}",
           R"({"points": []})",
           R"({"points": [{"batch": 1, "draft_ms": 1}]})",
           R"({"points": [{"batch": 1, "draft_ms": 1, "step_ms": []}]})",
           R"({"points": [{"batch": 1, "draft_ms": 1, "step_ms": [1, -2]}]})",
           R"({"points": [{"batch": 8, "draft_ms": 1, "step_ms": [1, 2]},
                          {"batch": 1, "draft_ms": 1, "step_ms": [1, 2]}]})",
           R"({"points": [{"batch": 1, "draft_ms": 1, "step_ms": [1, 2]},
                          {"batch": 8, "draft_ms": 1, "step_ms": [1]}]})",
           R"({"backend": 3, "points": [{"batch": 1, "draft_ms": 1, "step_ms": [1]}]})",
       }) {
    EXPECT_EQ(ParseVerifyCostCurve(bad).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

}  // namespace
}  // namespace weir::worker
