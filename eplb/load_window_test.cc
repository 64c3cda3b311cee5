#include "eplb/load_window.h"

#include "gtest/gtest.h"

namespace weir::eplb {
namespace {

LoadReportData Report(int rank, std::vector<uint64_t> counts) {
  return LoadReportData{.rank = rank, .num_layers = 1, .num_logical = 4,
                        .counts = std::move(counts)};
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
}

TEST(LoadWindowTest, RankLoadsAndBalance) {
  LoadWindow window(4);
  ASSERT_TRUE(window.Add(Report(0, {30, 10, 5, 5})).ok());
  // Rank 0 holds experts {0,1}, rank 1 holds {2,3}.
  std::vector<uint64_t> loads = window.RankLoadsUnderIdentity(2);
  EXPECT_EQ(loads, (std::vector<uint64_t>{40, 10}));
  EXPECT_DOUBLE_EQ(BalanceRatio(loads), 40.0 / 25.0);
  EXPECT_TRUE(window.RankLoadsUnderIdentity(3).empty());  // 4 experts do not split 3 ways.
  EXPECT_DOUBLE_EQ(BalanceRatio({0, 0}), 1.0);
  EXPECT_DOUBLE_EQ(BalanceRatio({}), 1.0);
}

TEST(LoadWindowTest, RejectsMalformedReports) {
  LoadWindow window(4);
  EXPECT_EQ(window.Add(Report(0, {1, 2})).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(window.Add(Report(-1, {1, 2, 3, 4})).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(window.Add(Report(0, {1, 2, 3, 4})).ok());
  LoadReportData other{.rank = 0, .num_layers = 2, .num_logical = 2, .counts = {1, 2, 3, 4}};
  EXPECT_EQ(window.Add(other).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(window.totals(), (std::vector<uint64_t>{1, 2, 3, 4}));  // Unchanged.
}

}  // namespace
}  // namespace weir::eplb
