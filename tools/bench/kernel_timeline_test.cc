#include "tools/bench/kernel_timeline.h"

#include <vector>

#include "gtest/gtest.h"

namespace weir::bench {
namespace {

TEST(KernelTimelineTest, SharesTheWallTimeAmongRunningKernelsAndFindsTheGaps) {
  // A alone, then A and B together, B alone, nothing, C alone (ns).
  const std::vector<KernelRecord> records = {
      {.start_ns = 1200, .end_ns = 1300, .stream = 7, .name = "C"},
      {.start_ns = 1000, .end_ns = 1100, .stream = 7, .name = "A"},
      {.start_ns = 1050, .end_ns = 1150, .stream = 8, .name = "B"},
  };
  const TimelineSummary s = SummarizeTimeline(records, 4);
  EXPECT_EQ(s.kernels, 3);
  EXPECT_DOUBLE_EQ(s.span_us, 0.3);
  EXPECT_DOUBLE_EQ(s.idle_us, 0.05);
  ASSERT_EQ(s.shares.size(), 3u);
  EXPECT_EQ(s.shares[0].name, "C");
  EXPECT_DOUBLE_EQ(s.shares[0].wall_us, 0.1);
  for (int i = 1; i < 3; ++i) {
    EXPECT_DOUBLE_EQ(s.shares[i].wall_us, 0.075) << s.shares[i].name;
    EXPECT_DOUBLE_EQ(s.shares[i].busy_us, 0.1) << s.shares[i].name;
    EXPECT_EQ(s.shares[i].count, 1);
  }
  ASSERT_EQ(s.gaps.size(), 1u);
  EXPECT_DOUBLE_EQ(s.gaps[0].us, 0.05);
  EXPECT_EQ(s.gaps[0].before, "B");  // the kernel that ended last before the gap
  EXPECT_EQ(s.gaps[0].after, "C");
}

TEST(KernelTimelineTest, GroupsLaunchesByShortNameAndKeepsTheLargestGaps) {
  std::vector<KernelRecord> records;
  for (int i = 0; i < 5; ++i) {  // gaps of 10, 20, 30, 40 ns between 5 launches of 100
    const uint64_t at = static_cast<uint64_t>(i * 100 + i * (i + 1) / 2 * 10);
    records.push_back({.start_ns = at, .end_ns = at + 100, .name = "void ns::K<1>(int)"});
  }
  const TimelineSummary s = SummarizeTimeline(records, 2);
  ASSERT_EQ(s.shares.size(), 1u);
  EXPECT_EQ(s.shares[0].name, "K<1>");
  EXPECT_EQ(s.shares[0].count, 5);
  EXPECT_DOUBLE_EQ(s.shares[0].wall_us, 0.5);
  EXPECT_DOUBLE_EQ(s.idle_us, 0.1);
  ASSERT_EQ(s.gaps.size(), 2u);
  EXPECT_DOUBLE_EQ(s.gaps[0].us, 0.04);
  EXPECT_DOUBLE_EQ(s.gaps[1].us, 0.03);
  EXPECT_EQ(SummarizeTimeline({}, 3).kernels, 0);
}

TEST(KernelTimelineTest, TimeBeforeALaunchsFirstKernelIsTheHosts) {
  // Two launches (steps) of two kernels each, 1000 ns of host time between
  // them and a 20 ns gap inside the second.
  const std::vector<KernelRecord> records = {
      {.start_ns = 0, .end_ns = 100, .name = "A", .launch = 1},
      {.start_ns = 100, .end_ns = 200, .name = "B", .launch = 1},
      {.start_ns = 1200, .end_ns = 1300, .name = "A", .launch = 2},
      {.start_ns = 1320, .end_ns = 1400, .name = "B", .launch = 2},
  };
  const TimelineSummary s = SummarizeTimeline(records, 4);
  EXPECT_EQ(s.launches, 2);
  EXPECT_DOUBLE_EQ(s.host_us, 1.0);
  EXPECT_DOUBLE_EQ(s.idle_us, 0.02);
  EXPECT_DOUBLE_EQ(s.span_us, 0.4);
  ASSERT_EQ(s.gaps.size(), 1u);
  EXPECT_DOUBLE_EQ(s.gaps[0].us, 0.02);
  EXPECT_EQ(s.gaps[0].before, "A");
  EXPECT_EQ(s.gaps[0].after, "B");
}

TEST(KernelTimelineTest, ShortNamesDemangleAndDropScopesAndParameters) {
  EXPECT_EQ(ShortKernelName("_ZN4weir7kernels4cuda3moe15GroupRowsKernelEPKiliPKliPlPi"),
            "GroupRowsKernel");
  EXPECT_EQ(ShortKernelName("void a::b::Tile<64, (bool)1, c::D>(a::Args)"),
            "Tile<64, (bool)1, c::D>");
  EXPECT_EQ(ShortKernelName("RopeKernel"), "RopeKernel");
}

}  // namespace
}  // namespace weir::bench
