// coordinator/scheduler/router_test.cc

#include "coordinator/scheduler/router.h"

#include <vector>

#include "coordinator/scheduler/rank_scheduler.h"
#include "coordinator/scheduler/test_util.h"
#include "gtest/gtest.h"

namespace weir::coordinator::scheduler {
namespace {

RankLoad Load(int64_t used, int64_t waiting_blocks, int64_t queued, int64_t blocks = 100) {
  RankLoad l;
  l.num_used_blocks = used;
  l.num_waiting_blocks = waiting_blocks;
  l.num_waiting = queued;
  l.num_blocks = blocks;
  l.num_free_blocks = blocks - used;
  return l;
}

TEST(LeastLoadedRouterTest, LowestProjectedKvUseWins) {
  LeastLoadedRouter router;
  const SeqRequest req = MakeRequest(1, 4);
  EXPECT_EQ(*router.Route(req, {Load(50, 0, 0), Load(10, 30, 3)}), Rank(1));
  EXPECT_EQ(*router.Route(req, {Load(10, 30, 3), Load(50, 0, 0)}), Rank(0));
  // Pools of different sizes compare as fractions: 20/50 = 0.4 > 30/100 = 0.3.
  EXPECT_EQ(*router.Route(req, {Load(20, 0, 0, 50), Load(30, 0, 0, 100)}), Rank(1));
}

TEST(LeastLoadedRouterTest, TiesGoToShorterQueueThenLowestRank) {
  LeastLoadedRouter router;
  const SeqRequest req = MakeRequest(1, 4);
  EXPECT_EQ(*router.Route(req, {Load(10, 0, 2), Load(10, 0, 1), Load(10, 0, 1)}), Rank(1));
  EXPECT_EQ(*router.Route(req, {Load(0, 0, 0), Load(0, 0, 0)}), Rank(0));
  EXPECT_EQ(router.Route(req, {}).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(LeastLoadedRouterTest, ABurstSpreadsOverRanksThroughLiveLoads) {
  std::vector<std::unique_ptr<RankScheduler>> ranks;
  for (int r = 0; r < 3; ++r) ranks.push_back(*RankScheduler::Create(SmallConfig(64)));
  std::unique_ptr<Router> router = std::make_unique<LeastLoadedRouter>();
  std::vector<int> count(3, 0);
  for (uint64_t id = 0; id < 30; ++id) {
    const SeqRequest req = MakeRequest(id, 8);
    std::vector<RankLoad> loads;
    for (const auto& r : ranks) loads.push_back(r->Load());
    const Rank rank = *router->Route(req, loads);
    ASSERT_TRUE(ranks[rank.value()]->Add(req).ok());
    ++count[rank.value()];
  }
  EXPECT_EQ(count, (std::vector<int>{10, 10, 10}));
  EXPECT_EQ(ranks[0]->Load().num_waiting_blocks, 20);
}

}  // namespace
}  // namespace weir::coordinator::scheduler
