// eplb/policy/placement_test.cc

#include "eplb/policy/placement.h"

#include <vector>

#include "eplb/policy/test_util.h"
#include "gtest/gtest.h"

namespace weir::eplb::policy {
namespace {

TEST(PlacementTest, BuildsInverseMapAndCounts) {
  // 2 layers, 3 logical experts, 4 slots on 2 ranks.
  absl::StatusOr<Placement> p =
      PlacementFromPhysicalMap(2, 3, 2, {0, 1, 2, 0, /*layer 1*/ 2, 2, 1, 0});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_TRUE(IsConsistent(*p, 2, 3, 4, 2));
  EXPECT_EQ(p->max_replicas, 2);
  EXPECT_EQ(p->replica_count, (std::vector<int32_t>{2, 1, 1, 1, 1, 2}));
  EXPECT_EQ(p->logical_to_physical,
            (std::vector<int32_t>{0, 3, 1, -1, 2, -1, /*layer 1*/ 3, -1, 2, -1, 0, 1}));
  EXPECT_EQ(p->RankOfSlot(3), Rank(1));
  EXPECT_EQ(p->LogicalOf(LayerId(1), 1), ExpertId(2));
  EXPECT_EQ(p->ReplicasOf(LayerId(1), ExpertId(2)), 2);
  EXPECT_TRUE(ValidatePlacement(*p).ok());
}

TEST(PlacementTest, TrivialPlacementIsRoundRobin) {
  absl::StatusOr<Placement> p = TrivialPlacement(3, 4, 6, 3);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_TRUE(IsConsistent(*p, 3, 4, 6, 3));
  EXPECT_EQ(p->LogicalOf(LayerId(2), 5), ExpertId(1));
  EXPECT_EQ(p->ReplicasOf(LayerId(0), ExpertId(0)), 2);
  EXPECT_EQ(p->ReplicasOf(LayerId(0), ExpertId(3)), 1);
}

TEST(PlacementTest, RejectsBadShapes) {
  const auto code = [](const absl::StatusOr<Placement>& p) { return p.status().code(); };
  const auto kInvalid = absl::StatusCode::kInvalidArgument;
  EXPECT_EQ(code(TrivialPlacement(1, 4, 6, 4)), kInvalid);  // 6 slots over 4 ranks.
  EXPECT_EQ(code(TrivialPlacement(1, 8, 6, 2)), kInvalid);  // Fewer slots than experts.
  EXPECT_EQ(code(TrivialPlacement(0, 4, 4, 1)), kInvalid);
  EXPECT_EQ(code(TrivialPlacement(1, 4, 4, 0)), kInvalid);
  EXPECT_EQ(code(TrivialPlacement(1, 4, 4, -2)), kInvalid);
  EXPECT_EQ(code(PlacementFromPhysicalMap(2, 2, 1, {0, 1, 0})), kInvalid);  // Not [2, P].
  EXPECT_EQ(code(PlacementFromPhysicalMap(1, 3, 1, {0, 1, 1})), kInvalid);  // Expert 2 missing.
  EXPECT_EQ(code(PlacementFromPhysicalMap(1, 2, 1, {0, 2})), kInvalid);     // Out of range.
  EXPECT_EQ(code(PlacementFromPhysicalMap(1, 2, 1, {0, -1})), kInvalid);
  EXPECT_EQ(code(PlacementFromPhysicalMap(1, 2, 1, {})), kInvalid);
}

TEST(PlacementTest, ValidateDetectsEveryKindOfCorruption) {
  absl::StatusOr<Placement> good = PlacementFromPhysicalMap(1, 3, 2, {0, 1, 2, 0});
  ASSERT_TRUE(good.ok());
  Placement bad = *good;
  bad.logical_to_physical[1] = 2;  // Expert 0 claims slot 2, which serves expert 2.
  EXPECT_EQ(ValidatePlacement(bad).code(), absl::StatusCode::kInvalidArgument);
  bad = *good;
  bad.replica_count[1] = 2;
  EXPECT_EQ(ValidatePlacement(bad).code(), absl::StatusCode::kInvalidArgument);
  bad = *good;
  bad.physical_to_logical.pop_back();
  EXPECT_EQ(ValidatePlacement(bad).code(), absl::StatusCode::kInvalidArgument);
  bad = *good;
  bad.num_ranks = 3;
  EXPECT_EQ(ValidatePlacement(bad).code(), absl::StatusCode::kInvalidArgument);
  bad = *good;
  bad.max_replicas = 3;
  EXPECT_EQ(ValidatePlacement(bad).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace weir::eplb::policy
