// parallel/process_group_test.cc

#include "parallel/process_group.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace weir::parallel {
namespace {

using ::testing::ElementsAre;

std::vector<int> Members(const ProcessGroup& g) {
  std::vector<int> out;
  for (Rank r : g.members()) out.push_back(r.value());
  return out;
}

TEST(ProcessGroupTest, PureDpAndEpAreTheWorld) {
  absl::StatusOr<RankGroups> g =
      GroupsForRank({.world_size = 4, .dp_size = 4, .ep_size = 4}, Rank(2));
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_THAT(Members(g->world), ElementsAre(0, 1, 2, 3));
  EXPECT_THAT(Members(g->dp), ElementsAre(0, 1, 2, 3));
  EXPECT_THAT(Members(g->ep), ElementsAre(0, 1, 2, 3));
  EXPECT_EQ(g->ep.ToGroup(Rank(2)), Rank(2));
}

TEST(ProcessGroupTest, SplitLayoutMapsRanksBothWays) {
  const ParallelLayout layout{.world_size = 8, .dp_size = 4, .ep_size = 4};
  absl::StatusOr<RankGroups> g = GroupsForRank(layout, Rank(5));
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_THAT(Members(g->ep), ElementsAre(4, 5, 6, 7));
  EXPECT_EQ(g->ep_group_index, 1);
  EXPECT_THAT(Members(g->dp), ElementsAre(1, 3, 5, 7));
  EXPECT_EQ(g->dp_group_index, 1);
  EXPECT_EQ(g->ep.ToGroup(Rank(5)), Rank(1));
  EXPECT_EQ(g->dp.ToGroup(Rank(5)), Rank(2));
  EXPECT_EQ(g->dp.ToGlobal(Rank(3)), Rank(7));
  EXPECT_EQ(g->ep.ToGroup(Rank(3)), std::nullopt);
  EXPECT_FALSE(g->dp.Contains(Rank(4)));
  EXPECT_FALSE(g->dp.Contains(Rank(100)));
  for (int gr = 0; gr < g->dp.size(); ++gr) {
    EXPECT_EQ(g->dp.ToGroup(g->dp.ToGlobal(Rank(gr))), Rank(gr));
  }

  absl::StatusOr<std::vector<ProcessGroup>> all = AllEpGroups(layout);
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(all->size(), 2u);
  EXPECT_THAT(Members((*all)[0]), ElementsAre(0, 1, 2, 3));
  EXPECT_EQ((*all)[1].name(), "ep1");
}

TEST(ProcessGroupTest, EveryRankIsInExactlyOneGroupOfEachKind) {
  const ParallelLayout layout{.world_size = 12, .dp_size = 6, .ep_size = 3};
  std::vector<int> ep_hits(12, 0), dp_hits(12, 0);
  for (int r = 0; r < 12; ++r) {
    absl::StatusOr<RankGroups> g = GroupsForRank(layout, Rank(r));
    ASSERT_TRUE(g.ok()) << g.status();
    EXPECT_EQ(g->dp.size(), 6);
    EXPECT_EQ(g->ep.size(), 3);
    EXPECT_TRUE(g->dp.Contains(Rank(r)));
    EXPECT_TRUE(g->ep.Contains(Rank(r)));
    // Count membership from the group's first member's point of view only.
    if (g->ep.ToGroup(Rank(r)) == Rank(0)) {
      for (Rank m : g->ep.members()) ++ep_hits[m.value()];
    }
    if (g->dp.ToGroup(Rank(r)) == Rank(0)) {
      for (Rank m : g->dp.members()) ++dp_hits[m.value()];
    }
  }
  EXPECT_THAT(ep_hits, ::testing::Each(1));
  EXPECT_THAT(dp_hits, ::testing::Each(1));
}

TEST(ProcessGroupTest, RejectsBadLayoutsAndRanks) {
  EXPECT_EQ(ValidateLayout({.world_size = 0}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ValidateLayout({.world_size = 6, .dp_size = 4, .ep_size = 6}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ValidateLayout({.world_size = 6, .dp_size = 6, .ep_size = 0}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(ValidateLayout({.world_size = 6, .dp_size = 3, .ep_size = 2}).ok());
  EXPECT_EQ(GroupsForRank({.world_size = 4, .dp_size = 4, .ep_size = 4}, Rank(4)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(GroupsForRank({.world_size = 4, .dp_size = 4, .ep_size = 4}, Rank(-1)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(AllEpGroups({.world_size = 4, .dp_size = 4, .ep_size = 3}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace weir::parallel
