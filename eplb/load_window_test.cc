#include "eplb/load_window.h"

#include "gtest/gtest.h"

namespace weir::eplb {
namespace {

LoadReportData Report(int rank, std::vector<uint64_t> counts, uint64_t step_id = 0) {
  return LoadReportData{.rank = rank, .step_id = step_id, .num_layers = 1, .num_logical = 4,
                        .counts = std::move(counts)};
}

// A [2 layers, 2 experts] report with served rows.
LoadReportData Served(int rank, uint64_t step_id, uint64_t version,
                      std::vector<uint64_t> served) {
  return LoadReportData{.rank = rank, .step_id = step_id, .num_layers = 2, .num_logical = 2,
                        .counts = {1, 1, 1, 1}, .map_version = version,
                        .served = std::move(served)};
}

TEST(LoadWindowTest, SumsAndEvictsOldest) {
  LoadWindow window(2);
  ASSERT_TRUE(window.Add(Report(0, {1, 2, 3, 4})).ok());
  ASSERT_TRUE(window.Add(Report(1, {10, 0, 0, 0})).ok());
  EXPECT_EQ(window.totals(), (std::vector<uint64_t>{11, 2, 3, 4}));
  ASSERT_TRUE(window.Add(Report(0, {0, 0, 0, 100})).ok());  // Evicts the first.
  EXPECT_EQ(window.totals(), (std::vector<uint64_t>{10, 0, 0, 100}));
  EXPECT_EQ(window.size(), 2);
  EXPECT_EQ(window.total_reports(), 3u);
  window.GrowTo(3);
  ASSERT_TRUE(window.Add(Report(0, {1, 0, 0, 0})).ok());  // Room for one more now.
  EXPECT_EQ(window.size(), 3);
  window.GrowTo(1);  // Never shrinks.
  EXPECT_EQ(window.window_size(), 3);
}

TEST(LoadWindowTest, LoadByStepSumsRanksOfOneStep) {
  LoadWindow window(8);
  EXPECT_EQ(window.LoadByStep().status().code(), absl::StatusCode::kFailedPrecondition);
  // Out of order on purpose: windows follow the step ids, not arrival.
  ASSERT_TRUE(window.Add(Report(0, {1, 2, 3, 4}, /*step_id=*/256)).ok());
  ASSERT_TRUE(window.Add(Report(0, {5, 0, 0, 0}, /*step_id=*/128)).ok());
  ASSERT_TRUE(window.Add(Report(1, {0, 0, 7, 1}, /*step_id=*/128)).ok());
  ASSERT_TRUE(window.Add(Report(1, {1, 1, 1, 1}, /*step_id=*/256)).ok());
  absl::StatusOr<policy::ExpertLoad> load = window.LoadByStep();
  ASSERT_TRUE(load.ok()) << load.status();
  ASSERT_EQ(load->num_windows(), 2);
  ASSERT_EQ(load->num_layers(), 1);
  ASSERT_EQ(load->num_logical_experts(), 4);
  const double step128[] = {5, 0, 7, 1};
  const double step256[] = {2, 3, 4, 5};
  for (int e = 0; e < 4; ++e) {
    EXPECT_EQ(load->at(0, 0, e), step128[e]) << e;
    EXPECT_EQ(load->at(1, 0, e), step256[e]) << e;
  }
}

TEST(LoadWindowTest, CountsRoundsWhenEveryRankReported) {
  LoadWindow window(16);
  ASSERT_TRUE(window.Add(Report(0, {1, 1, 1, 1}, 0)).ok());  // World unset: no rounds.
  EXPECT_EQ(window.complete_rounds(), 0u);
  EXPECT_EQ(window.CompleteStepsInWindow(), 0);
  window.SetWorldSize(3);
  EXPECT_EQ(window.Add(Report(3, {1, 1, 1, 1}, 1)).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(window.Add(Report(0, {1, 1, 1, 1}, 1)).ok());
  ASSERT_TRUE(window.Add(Report(2, {1, 1, 1, 1}, 1)).ok());
  ASSERT_TRUE(window.Add(Report(2, {1, 1, 1, 1}, 1)).ok());  // A duplicate is no new rank.
  EXPECT_EQ(window.complete_rounds(), 0u);
  ASSERT_TRUE(window.Add(Report(1, {1, 1, 1, 1}, 1)).ok());
  EXPECT_EQ(window.complete_rounds(), 1u);
  ASSERT_TRUE(window.Add(Report(1, {1, 1, 1, 1}, 1)).ok());  // Counted once.
  EXPECT_EQ(window.complete_rounds(), 1u);
  for (int r = 0; r < 3; ++r) ASSERT_TRUE(window.Add(Report(r, {1, 1, 1, 1}, 2)).ok());
  EXPECT_EQ(window.complete_rounds(), 2u);
  EXPECT_EQ(window.CompleteStepsInWindow(), 2);
}

TEST(LoadWindowTest, MeasuredRatioPerStepAndLayer) {
  LoadWindow window(32);
  window.SetWorldSize(2);
  EXPECT_EQ(window.MeasuredRatio(0), 0.0);  // Nothing measured yet.
  // Step 10 under version 3: layer 0 served {30, 10} -> 30 / 20 = 1.5;
  // layer 1 served {0, 0} -> no load, not averaged.
  ASSERT_TRUE(window.Add(Served(0, 10, 3, {30, 0})).ok());
  ASSERT_TRUE(window.Add(Served(1, 10, 3, {10, 0})).ok());
  EXPECT_DOUBLE_EQ(window.MeasuredRatio(3), 1.5);
  // Step 20 under version 3: layer 0 {5, 5} -> 1.0; layer 1 {0, 8} -> 2.0.
  ASSERT_TRUE(window.Add(Served(0, 20, 3, {5, 0})).ok());
  ASSERT_TRUE(window.Add(Served(1, 20, 3, {5, 8})).ok());
  EXPECT_DOUBLE_EQ(window.MeasuredRatio(3), (1.5 + 1.0 + 2.0) / 3);
  // Step 30: only rank 0 reported under version 3 (rank 1 already under 4):
  // incomplete for both versions, so neither changes.
  ASSERT_TRUE(window.Add(Served(0, 30, 3, {100, 0})).ok());
  ASSERT_TRUE(window.Add(Served(1, 30, 4, {0, 100})).ok());
  EXPECT_DOUBLE_EQ(window.MeasuredRatio(3), (1.5 + 1.0 + 2.0) / 3);
  EXPECT_EQ(window.MeasuredRatio(4), 0.0);
  // A report without served rows does not count as measured.
  LoadReportData unmeasured = Served(0, 40, 4, {});
  ASSERT_TRUE(window.Add(unmeasured).ok());
  ASSERT_TRUE(window.Add(Served(1, 40, 4, {4, 4})).ok());
  EXPECT_EQ(window.MeasuredRatio(4), 0.0);
  ASSERT_TRUE(window.Add(Served(0, 50, 4, {6, 2})).ok());
  ASSERT_TRUE(window.Add(Served(1, 50, 4, {2, 2})).ok());
  EXPECT_DOUBLE_EQ(window.MeasuredRatio(4), (6.0 / 4.0 + 1.0) / 2);
  EXPECT_EQ(window.MapVersions(), (std::vector<uint64_t>{3, 4}));
}

TEST(LoadWindowTest, RejectsMalformedReports) {
  LoadWindow window(4);
  EXPECT_EQ(window.Add(Report(0, {1, 2})).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(window.Add(Report(-1, {1, 2, 3, 4})).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(window.Add(Report(0, {1, 2, 3, 4})).ok());
  LoadReportData other{.rank = 0, .num_layers = 2, .num_logical = 2, .counts = {1, 2, 3, 4}};
  EXPECT_EQ(window.Add(other).code(), absl::StatusCode::kInvalidArgument);
  LoadReportData bad_served = Report(0, {1, 2, 3, 4});
  bad_served.served = {1, 2};  // One layer, two rows.
  EXPECT_EQ(window.Add(bad_served).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(window.totals(), (std::vector<uint64_t>{1, 2, 3, 4}));  // Unchanged.
  EXPECT_EQ(window.size(), 1);
}

}  // namespace
}  // namespace weir::eplb
