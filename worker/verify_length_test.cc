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
