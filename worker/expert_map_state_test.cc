#include "worker/expert_map_state.h"

#include "gtest/gtest.h"

namespace weir::worker {
namespace {

// 2 layers, 4 logical experts, 2 ranks with 3 slots each: experts 0 and 1
// get a second replica.
ExpertMap Redundant(uint64_t version) {
  ExpertMap map;
  map.version = version;
  map.num_layers = 2;
  map.num_logical = 4;
  map.num_physical = 6;
  map.slots_per_rank = 3;
  map.physical_to_logical = {0, 1, 2, 3, 0, 1, /*layer 1*/ 3, 2, 1, 0, 3, 2};
  return map;
}

ExpertMap Initial() {
  ExpertMap map = Redundant(0);
  return map;
}

TEST(ExpertMapTest, IdentityIsValidAndSplitsByRank) {
  ExpertMap id = IdentityExpertMap(3, 8, 4);
  EXPECT_TRUE(ValidateExpertMap(id, 4).ok());
  EXPECT_EQ(id.ExpertsOnRank(2, 3), (std::vector<int32_t>{6, 7}));
  EXPECT_EQ(Redundant(1).ExpertsOnRank(1, 1), (std::vector<int32_t>{0, 3, 2}));
  // 8 experts over 64 ranks: one slot each, every expert replicated 8 times.
  ExpertMap wide = IdentityExpertMap(2, 8, 64);
  EXPECT_TRUE(ValidateExpertMap(wide, 64).ok());
  EXPECT_EQ(wide.num_physical, 64);
  EXPECT_EQ(wide.ExpertsOnRank(1, 63), (std::vector<int32_t>{7}));
  // 8 experts over 3 ranks: 3 slots each, experts 0 and 1 twice.
  EXPECT_TRUE(ValidateExpertMap(IdentityExpertMap(1, 8, 3), 3).ok());
}

TEST(ExpertMapTest, ValidationNamesTheProblem) {
  ExpertMap bad = Redundant(1);
  bad.physical_to_logical[7] = 9;
  absl::Status s = ValidateExpertMap(bad, 2);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("layer 1 slot 1"), std::string::npos);

  ExpertMap missing = Redundant(1);
  missing.physical_to_logical[3] = 0;  // Layer 0 loses expert 3.
  EXPECT_NE(ValidateExpertMap(missing, 2).message().find("no replica of expert 3"),
            std::string::npos);

  EXPECT_FALSE(ValidateExpertMap(Redundant(1), 3).ok());  // 6 slots != 3 x 3.
  ExpertMap short_map = Redundant(1);
  short_map.physical_to_logical.pop_back();
  EXPECT_FALSE(ValidateExpertMap(short_map, 2).ok());
  ExpertMap empty;
  EXPECT_FALSE(ValidateExpertMap(empty, 1).ok());
}

TEST(ExpertMapStateTest, PrepareThenCommitSwitches) {
  ExpertMapState state(Initial());
  EXPECT_EQ(state.committed().version, 0u);
  ASSERT_TRUE(state.Prepare(Redundant(1), 2).ok());
  EXPECT_EQ(state.staged_version(), 1u);
  EXPECT_EQ(state.committed().version, 0u);  // Nothing changes before commit.
  ASSERT_TRUE(state.Commit(1).ok());
  EXPECT_EQ(state.committed().version, 1u);
  EXPECT_FALSE(state.staged_version().has_value());
  EXPECT_TRUE(state.Commit(1).ok());  // Idempotent.
}

TEST(ExpertMapStateTest, MissedVersionIsRefused) {
  ExpertMapState state(Initial());
  ASSERT_TRUE(state.Prepare(Redundant(1), 2).ok());
  // The coordinator commits version 2, which this worker never saw.
  absl::Status s = state.Commit(2);
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted);
  EXPECT_NE(s.message().find("staged: 1"), std::string::npos);
  EXPECT_EQ(state.committed().version, 0u);
  EXPECT_EQ(ExpertMapState(Initial()).Commit(5).code(), absl::StatusCode::kAborted);
}

TEST(ExpertMapStateTest, StaleOrMisshapenPrepareIsRefused) {
  ExpertMapState state(Initial());
  ASSERT_TRUE(state.Prepare(Redundant(3), 2).ok());
  ASSERT_TRUE(state.Commit(3).ok());
  EXPECT_EQ(state.Prepare(Redundant(2), 2).code(), absl::StatusCode::kAborted);
  EXPECT_EQ(state.Prepare(Redundant(3), 2).code(), absl::StatusCode::kAborted);
  ExpertMap other_shape = IdentityExpertMap(2, 6, 2);
  other_shape.version = 9;
  EXPECT_EQ(state.Prepare(other_shape, 2).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(state.committed().version, 3u);
}

}  // namespace
}  // namespace weir::worker
