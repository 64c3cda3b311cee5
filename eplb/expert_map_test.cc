#include "eplb/expert_map.h"

#include "gtest/gtest.h"

namespace weir::eplb {
namespace {

TEST(ExpertMapTest, InitialPlacementMatchesTheWorkersIdentityMap) {
  // 5 experts over 2 ranks: 3 slots each, slot p holds expert p % 5.
  absl::StatusOr<policy::Placement> placement = InitialPlacement(2, 5, 2);
  ASSERT_TRUE(placement.ok()) << placement.status();
  EXPECT_EQ(placement->num_physical, 6);
  EXPECT_EQ(placement->slots_per_rank(), 3);
  EXPECT_EQ(placement->physical_to_logical,
            (std::vector<int32_t>{0, 1, 2, 3, 4, 0, 0, 1, 2, 3, 4, 0}));
  EXPECT_EQ(InitialPlacement(0, 5, 2).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(InitialPlacement(2, 5, 0).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ExpertMapTest, RoundTrips) {
  absl::StatusOr<policy::Placement> placement =
      policy::PlacementFromPhysicalMap(1, 3, 2, {2, 0, 1, 2});
  ASSERT_TRUE(placement.ok()) << placement.status();
  v1::ExpertMap map = ToExpertMapProto(*placement, 7);
  EXPECT_EQ(map.version(), 7u);
  EXPECT_EQ(map.num_layers(), 1u);
  EXPECT_EQ(map.num_physical(), 4u);
  EXPECT_EQ(map.num_logical(), 3u);
  EXPECT_EQ(map.slots_per_rank(), 2u);
  absl::StatusOr<policy::Placement> back = FromExpertMapProto(map);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, *placement);
}

TEST(ExpertMapTest, RejectsMalformedMaps) {
  absl::StatusOr<policy::Placement> placement = InitialPlacement(1, 4, 2);
  ASSERT_TRUE(placement.ok());
  const v1::ExpertMap good = ToExpertMapProto(*placement, 1);
  v1::ExpertMap map = good;
  map.set_slots_per_rank(3);  // 4 slots do not split into 3 per rank.
  EXPECT_EQ(FromExpertMapProto(map).status().code(), absl::StatusCode::kInvalidArgument);
  map = good;
  map.add_physical_to_logical(0);  // 5 entries for [1, 4].
  EXPECT_EQ(FromExpertMapProto(map).status().code(), absl::StatusCode::kInvalidArgument);
  map = good;
  map.set_physical_to_logical(0, 9);  // Out of range.
  EXPECT_EQ(FromExpertMapProto(map).status().code(), absl::StatusCode::kInvalidArgument);
  map = good;
  map.set_physical_to_logical(0, 1);  // Expert 0 has no slot left.
  EXPECT_EQ(FromExpertMapProto(map).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(FromExpertMapProto(v1::ExpertMap()).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace weir::eplb
