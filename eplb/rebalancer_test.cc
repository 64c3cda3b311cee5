#include "eplb/rebalancer.h"

#include <chrono>
#include <set>

#include "eplb/expert_map.h"
#include "eplb/fake_cluster_link.h"
#include "gtest/gtest.h"

namespace weir::eplb {
namespace {

constexpr int kWorld = 4;
constexpr int kLayers = 2;
constexpr int kLogical = 8;
constexpr uint64_t kEpoch = 42;

// Two windows of [2 layers, 8 experts]. Skewed: experts 0 and 1, both on
// rank 0 under the initial map, take most of the tokens.
LoadSnapshot Snapshot(bool skewed) {
  std::vector<int64_t> counts;
  for (int w = 0; w < 2; ++w) {
    for (int l = 0; l < kLayers; ++l) {
      for (int e = 0; e < kLogical; ++e) counts.push_back(skewed && e < 2 ? 100 + w : 10);
    }
  }
  absl::StatusOr<policy::ExpertLoad> load =
      policy::ExpertLoad::FromCounts(2, kLayers, kLogical, counts);
  EXPECT_TRUE(load.ok()) << load.status();
  return LoadSnapshot{.load = *std::move(load), .measured_ratio = {{0, 3.5}}};
}

RebalancerOptions Options() {
  return RebalancerOptions{.rearrange_interval = 10, .min_window_rounds = 2,
                           .gain_threshold = 0.05};
}

class RebalancerTest : public ::testing::Test {
 protected:
  // The fake's Prepare waits up to 5 s for every rank: calling the ranks one
  // after another fails the attempt with DEADLINE_EXCEEDED.
  FakeClusterLink link_{kWorld, kEpoch, absl::Seconds(5)};
};

TEST_F(RebalancerTest, SkewedLoadIsPreparedOnEveryRankAtOnceThenCommitted) {
  Rebalancer rebalancer(Options(), &link_);
  const auto start = std::chrono::steady_clock::now();
  ASSERT_EQ(rebalancer.RebalanceOnce(Snapshot(/*skewed=*/true)), AttemptOutcome::kCommitted)
      << rebalancer.State().history.back().detail();
  const double attempt_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();

  std::vector<FakeClusterLink::PrepareCall> prepares = link_.prepare_calls();
  ASSERT_EQ(prepares.size(), static_cast<size_t>(kWorld));
  std::set<int> ranks;
  for (const FakeClusterLink::PrepareCall& call : prepares) {
    ranks.insert(call.rank);
    EXPECT_EQ(call.epoch, kEpoch);
    EXPECT_EQ(call.map.version(), 1u);
    EXPECT_EQ(call.map.num_layers(), static_cast<uint32_t>(kLayers));
    EXPECT_EQ(call.map.num_logical(), static_cast<uint32_t>(kLogical));
    EXPECT_EQ(call.map.num_physical(), 8u);  // The initial map's shape is kept.
    EXPECT_EQ(call.map.slots_per_rank(), 2u);
    EXPECT_EQ(call.map.SerializeAsString(), prepares[0].map.SerializeAsString());
  }
  EXPECT_EQ(ranks, (std::set<int>{0, 1, 2, 3}));
  // The hot experts no longer share a rank.
  absl::StatusOr<policy::Placement> placed = FromExpertMapProto(prepares[0].map);
  ASSERT_TRUE(placed.ok()) << placed.status();
  for (int l = 0; l < kLayers; ++l) {
    std::set<int> hot_ranks;
    for (int p = 0; p < placed->num_physical; ++p) {
      if (placed->LogicalOf(LayerId(l), p).value() < 2) {
        hot_ranks.insert(placed->RankOfSlot(p).value());
      }
    }
    EXPECT_EQ(hot_ranks.size(), 2u) << "layer " << l;
  }

  std::vector<v1::CommitExpertMapRequest> commits = link_.commits();
  ASSERT_EQ(commits.size(), 1u);
  EXPECT_EQ(commits[0].version(), 1u);
  EXPECT_EQ(commits[0].map().SerializeAsString(), prepares[0].map.SerializeAsString());

  RebalancerState state = rebalancer.State();
  EXPECT_EQ(state.committed_version, 1u);
  ASSERT_TRUE(state.committed_map.has_value());
  EXPECT_EQ(state.committed_map->SerializeAsString(), prepares[0].map.SerializeAsString());
  EXPECT_EQ(state.proposals, 1u);
  EXPECT_EQ(state.skipped_low_gain, 0u);
  ASSERT_EQ(state.history.size(), 1u);
  const v1::EplbState::Rebalance& entry = state.history[0];
  EXPECT_EQ(entry.version(), 1u);
  EXPECT_TRUE(entry.committed());
  EXPECT_EQ(entry.detail(), "");
  EXPECT_GT(entry.ratio_before(), 1.5);
  EXPECT_LT(entry.ratio_after(), entry.ratio_before() * 0.7);
  EXPECT_DOUBLE_EQ(entry.measured_before(), 3.5);  // Measured under version 0.
  EXPECT_EQ(entry.bytes_moved(), 1000u + 2000u + 3000u + 4000u);
  // The phases were timed inside this attempt: each within its wall time.
  EXPECT_GE(entry.prepare_ms(), 0.0);
  EXPECT_GE(entry.commit_ms(), 0.0);
  EXPECT_LE(entry.prepare_ms() + entry.commit_ms(), attempt_ms);

  // The same load again: the committed map already balances it.
  EXPECT_EQ(rebalancer.RebalanceOnce(Snapshot(true)), AttemptOutcome::kSkippedLowGain);
  state = rebalancer.State();
  EXPECT_EQ(state.proposals, 2u);
  EXPECT_EQ(state.skipped_low_gain, 1u);
  EXPECT_EQ(state.history.size(), 1u);
  EXPECT_EQ(link_.prepare_calls().size(), static_cast<size_t>(kWorld));
}

// The hierarchical policy over 2 nodes (ranks 0-1 and 2-3) and 2 expert
// groups (experts 0-3 and 4-7): every replica of a group stays on one node,
// and the hot experts 0 and 1 (one group) still end up on different ranks.
TEST_F(RebalancerTest, HierarchicalPolicyKeepsGroupsOnTheirNode) {
  RebalancerOptions options = Options();
  options.nodes = 2;
  options.groups = 2;
  Rebalancer rebalancer(options, &link_);
  ASSERT_EQ(rebalancer.RebalanceOnce(Snapshot(/*skewed=*/true)), AttemptOutcome::kCommitted)
      << rebalancer.State().history.back().detail();
  std::vector<v1::CommitExpertMapRequest> commits = link_.commits();
  ASSERT_EQ(commits.size(), 1u);
  absl::StatusOr<policy::Placement> placed = FromExpertMapProto(commits[0].map());
  ASSERT_TRUE(placed.ok()) << placed.status();
  for (int l = 0; l < kLayers; ++l) {
    std::set<int> node_of_group[2];
    std::set<int> hot_ranks;
    for (int p = 0; p < placed->num_physical; ++p) {
      const int e = placed->LogicalOf(LayerId(l), p).value();
      const int rank = placed->RankOfSlot(p).value();
      node_of_group[e / 4].insert(rank / 2);
      if (e < 2) hot_ranks.insert(rank);
    }
    EXPECT_EQ(node_of_group[0].size(), 1u) << "layer " << l;
    EXPECT_EQ(node_of_group[1].size(), 1u) << "layer " << l;
    EXPECT_EQ(hot_ranks.size(), 2u) << "layer " << l;
  }
}

TEST_F(RebalancerTest, LowGainMovesNothing) {
  Rebalancer rebalancer(Options(), &link_);
  EXPECT_EQ(rebalancer.RebalanceOnce(Snapshot(/*skewed=*/false)),
            AttemptOutcome::kSkippedLowGain);
  EXPECT_TRUE(link_.prepare_calls().empty());
  EXPECT_TRUE(link_.commits().empty());
  RebalancerState state = rebalancer.State();
  EXPECT_EQ(state.skipped_low_gain, 1u);
  EXPECT_EQ(state.proposals, 1u);
  EXPECT_TRUE(state.history.empty());
  EXPECT_EQ(state.committed_version, 0u);
  ASSERT_TRUE(state.committed_map.has_value());  // The initial map, learned on the way.
  EXPECT_EQ(state.committed_map->num_physical(), 8u);
}

TEST_F(RebalancerTest, FailedPrepareIsNotCommitted) {
  link_.FailPrepare(2, absl::UnavailableError("staging peer gone"));
  Rebalancer rebalancer(Options(), &link_);
  EXPECT_EQ(rebalancer.RebalanceOnce(Snapshot(true)), AttemptOutcome::kFailed);
  EXPECT_EQ(link_.prepare_calls().size(), static_cast<size_t>(kWorld));
  EXPECT_TRUE(link_.commits().empty());
  RebalancerState state = rebalancer.State();
  EXPECT_EQ(state.committed_version, 0u);
  ASSERT_EQ(state.history.size(), 1u);
  const v1::EplbState::Rebalance& entry = state.history[0];
  EXPECT_EQ(entry.version(), 1u);
  EXPECT_FALSE(entry.committed());
  EXPECT_NE(entry.detail().find("rank 2"), std::string::npos) << entry.detail();
  EXPECT_NE(entry.detail().find("staging peer gone"), std::string::npos) << entry.detail();
  EXPECT_NE(entry.detail().find("1 of 4 ranks failed"), std::string::npos) << entry.detail();
  EXPECT_EQ(entry.bytes_moved(), 1000u + 2000u + 4000u);  // The ranks that staged.
}

TEST_F(RebalancerTest, FailedCommitKeepsTheOldMapAndTheNextAttemptRetries) {
  link_.SetCommitError(absl::AbortedError("stale epoch"));
  Rebalancer rebalancer(Options(), &link_);
  EXPECT_EQ(rebalancer.RebalanceOnce(Snapshot(true)), AttemptOutcome::kFailed);
  EXPECT_EQ(link_.commits().size(), 1u);
  RebalancerState state = rebalancer.State();
  EXPECT_EQ(state.committed_version, 0u);
  ASSERT_EQ(state.history.size(), 1u);
  EXPECT_FALSE(state.history[0].committed());
  EXPECT_NE(state.history[0].detail().find("commit: stale epoch"), std::string::npos)
      << state.history[0].detail();
  EXPECT_EQ(state.history[0].bytes_moved(), 10000u);

  link_.SetCommitError(absl::OkStatus());
  EXPECT_EQ(rebalancer.RebalanceOnce(Snapshot(true)), AttemptOutcome::kCommitted);
  state = rebalancer.State();
  EXPECT_EQ(state.committed_version, 1u);  // The same version, prepared again.
  ASSERT_EQ(state.history.size(), 2u);
  EXPECT_EQ(state.history[1].version(), 1u);
  EXPECT_TRUE(state.history[1].committed());
}

TEST_F(RebalancerTest, UnreachableCoordinatorIsRecorded) {
  link_.SetPlacementError(absl::UnavailableError("connection refused"));
  Rebalancer rebalancer(Options(), &link_);
  EXPECT_EQ(rebalancer.RebalanceOnce(Snapshot(true)), AttemptOutcome::kFailed);
  EXPECT_TRUE(link_.prepare_calls().empty());
  RebalancerState state = rebalancer.State();
  EXPECT_FALSE(state.committed_map.has_value());
  EXPECT_EQ(state.proposals, 0u);
  ASSERT_EQ(state.history.size(), 1u);
  EXPECT_EQ(state.history[0].detail(), "UNAVAILABLE: connection refused");
}

TEST_F(RebalancerTest, KeepsTheCommittedShapeWithRedundantSlots) {
  // Committed version 5: 3 slots per rank, 4 redundant replicas.
  absl::StatusOr<policy::Placement> redundant = policy::TrivialPlacement(kLayers, kLogical, 12, 4);
  ASSERT_TRUE(redundant.ok());
  link_.SetCommittedMap(ToExpertMapProto(*redundant, 5));
  Rebalancer rebalancer(Options(), &link_);
  ASSERT_EQ(rebalancer.RebalanceOnce(Snapshot(true)), AttemptOutcome::kCommitted);
  ASSERT_EQ(link_.commits().size(), 1u);
  const v1::ExpertMap& map = link_.commits()[0].map();
  EXPECT_EQ(map.version(), 6u);
  EXPECT_EQ(map.num_physical(), 12u);
  EXPECT_EQ(map.slots_per_rank(), 3u);
  EXPECT_EQ(rebalancer.State().history[0].measured_before(), 0.0);  // None under version 5.
}

TEST_F(RebalancerTest, CommittedMapOfAnotherShapeFails) {
  absl::StatusOr<policy::Placement> other = InitialPlacement(kLayers + 1, kLogical, kWorld);
  ASSERT_TRUE(other.ok());
  link_.SetCommittedMap(ToExpertMapProto(*other, 3));
  Rebalancer rebalancer(Options(), &link_);
  EXPECT_EQ(rebalancer.RebalanceOnce(Snapshot(true)), AttemptOutcome::kFailed);
  EXPECT_TRUE(link_.prepare_calls().empty());
  ASSERT_EQ(rebalancer.State().history.size(), 1u);
  EXPECT_NE(rebalancer.State().history[0].detail().find("INVALID_ARGUMENT"), std::string::npos);
}

TEST_F(RebalancerTest, ProposalsAreDeterministic) {
  Rebalancer first(Options(), &link_);
  ASSERT_EQ(first.RebalanceOnce(Snapshot(true)), AttemptOutcome::kCommitted);
  FakeClusterLink other_link(kWorld, kEpoch, absl::Seconds(5));
  Rebalancer second(Options(), &other_link);
  ASSERT_EQ(second.RebalanceOnce(Snapshot(true)), AttemptOutcome::kCommitted);
  EXPECT_EQ(link_.commits()[0].SerializeAsString(), other_link.commits()[0].SerializeAsString());
}

TEST_F(RebalancerTest, HistoryKeepsTheLastAttempts) {
  link_.SetPlacementError(absl::UnavailableError("down"));
  RebalancerOptions options = Options();
  options.max_history = 2;
  Rebalancer rebalancer(options, &link_);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(rebalancer.RebalanceOnce(Snapshot(true)), AttemptOutcome::kFailed);
  }
  EXPECT_EQ(rebalancer.State().history.size(), 2u);
}

TEST_F(RebalancerTest, DueOncePerIntervalAfterEnoughRounds) {
  Rebalancer rebalancer(Options(), &link_);  // Every 10 rounds, 2 in the window.
  EXPECT_FALSE(rebalancer.Due(5, 5));
  EXPECT_FALSE(rebalancer.Due(10, 1));  // Too few rounds in the window.
  EXPECT_TRUE(rebalancer.Due(10, 2));
  EXPECT_FALSE(rebalancer.Due(10, 2));  // Each interval once.
  EXPECT_FALSE(rebalancer.Due(19, 5));
  EXPECT_TRUE(rebalancer.Due(21, 5));
  EXPECT_FALSE(rebalancer.Due(30, 5));
  EXPECT_TRUE(rebalancer.Due(31, 5));
}

TEST_F(RebalancerTest, SubmitRunsOnTheRebalancerThread) {
  Rebalancer rebalancer(Options(), &link_);
  rebalancer.Submit(Snapshot(true));
  rebalancer.WaitIdle();
  EXPECT_EQ(link_.commits().size(), 1u);
  EXPECT_EQ(rebalancer.State().committed_version, 1u);
}

}  // namespace
}  // namespace weir::eplb
