// SpansOfRole: the ranges cover every row of the role, start and end on the
// alignment (or the last row), never overlap, and cover nothing they need
// not beyond the alignment.
#include "worker/model/row_spans.h"

#include <cstdint>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace weir::model {
namespace {

TEST(RowSpansTest, WidensRunsToTheAlignmentAndMergesThem) {
  // Rows 0..39: role 0 at 2..4, 20, 21 and 37..39.
  std::vector<int32_t> roles(40, 1);
  for (int r : {2, 3, 4, 20, 21, 37, 38, 39}) roles[r] = 0;
  EXPECT_EQ(SpansOfRole(roles, 0, 16),
            (std::vector<RowSpan>{{.begin = 0, .end = 40}}));  // 0-16, 16-32, 32-40 touch
  EXPECT_EQ(SpansOfRole(roles, 0, 8), (std::vector<RowSpan>{{.begin = 0, .end = 8},
                                                            {.begin = 16, .end = 24},
                                                            {.begin = 32, .end = 40}}));
  EXPECT_EQ(SpansOfRole(roles, 0, 1), (std::vector<RowSpan>{{.begin = 2, .end = 5},
                                                            {.begin = 20, .end = 22},
                                                            {.begin = 37, .end = 40}}));
  EXPECT_EQ(SpansOfRole(roles, 2, 16), std::vector<RowSpan>{});
  EXPECT_EQ(SpansOfRole(std::vector<int32_t>{}, 0, 16), std::vector<RowSpan>{});
}

TEST(RowSpansTest, RandomRolesAreCoveredExactlyUpToTheAlignment) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 500; ++trial) {
    const int rows = std::uniform_int_distribution<int>(1, 300)(rng);
    const int align = std::vector<int>{1, 2, 8, 16, 64}[trial % 5];
    std::vector<int32_t> roles(rows);
    const int runs_of = std::uniform_int_distribution<int>(1, 40)(rng);
    for (int r = 0; r < rows; ++r) {
      roles[r] = r == 0 || std::uniform_int_distribution<int>(0, runs_of)(rng) == 0
                     ? std::uniform_int_distribution<int>(0, 1)(rng)
                     : roles[r - 1];
    }
    const std::vector<RowSpan> spans = SpansOfRole(roles, 0, align);
    std::vector<int> covered(rows, 0);
    for (size_t s = 0; s < spans.size(); ++s) {
      ASSERT_LT(spans[s].begin, spans[s].end);
      ASSERT_EQ(spans[s].begin % align, 0);
      ASSERT_TRUE(spans[s].end % align == 0 || spans[s].end == rows);
      if (s > 0) ASSERT_LT(spans[s - 1].end, spans[s].begin);  // disjoint, not touching
      for (int64_t r = spans[s].begin; r < spans[s].end; ++r) ++covered[r];
    }
    for (int r = 0; r < rows; ++r) {
      if (roles[r] == 0) ASSERT_EQ(covered[r], 1) << "row " << r << " of " << rows;
      // A covered row of the other role lies in an aligned block that holds
      // a row of the role.
      if (covered[r] == 1 && roles[r] != 0) {
        bool block_has_role = false;
        for (int q = r / align * align; q < std::min(rows, (r / align + 1) * align); ++q) {
          block_has_role = block_has_role || roles[q] == 0;
        }
        ASSERT_TRUE(block_has_role) << "row " << r << " covered needlessly";
      }
    }
  }
}

}  // namespace
}  // namespace weir::model
