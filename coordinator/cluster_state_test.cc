#include "coordinator/cluster_state.h"

#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace weir::coordinator {
namespace {

TEST(ClusterStateTest, AssignsRequestedThenLowestFreeRank) {
  ClusterState cluster(3);
  EXPECT_EQ(*cluster.RegisterWorker("h:1", "h", 10, 2), Rank(2));
  EXPECT_EQ(*cluster.RegisterWorker("h:2", "h", 11, 2), Rank(0));  // 2 is taken.
  EXPECT_EQ(*cluster.RegisterWorker("h:3", "h", 12, -1), Rank(1));
  EXPECT_EQ(cluster.RegisterWorker("h:4", "h", 13, -1).status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(cluster.WaitAllRegistered(absl::ZeroDuration()));
}

// A lost remote worker's rank is freed for the worker that rejoins; the
// others keep theirs (and a DEAD record does not survive the rejoin).
TEST(ClusterStateTest, ForgetWorkerFreesItsRankForARejoin) {
  ClusterState cluster(2);
  ASSERT_TRUE(cluster.RegisterWorker("h:1", "h", 1, 0).ok());
  ASSERT_TRUE(cluster.RegisterWorker("h:2", "h", 2, 1).ok());
  ASSERT_TRUE(cluster.SetWorkerStatus(Rank(1), WorkerStatus::kDead, "killed").ok());
  cluster.ForgetWorker(Rank(1));
  cluster.ForgetWorker(Rank(1));  // no-op
  EXPECT_FALSE(cluster.WaitAllRegistered(absl::ZeroDuration()));
  ASSERT_EQ(cluster.Workers().size(), 1u);
  EXPECT_EQ(*cluster.RegisterWorker("h:3", "h", 3, -1), Rank(1));
  EXPECT_TRUE(cluster.WaitAllRegistered(absl::ZeroDuration()));
  EXPECT_EQ(cluster.Workers()[1].status, WorkerStatus::kRegistered);
  // A worker asking for a held rank while none is free waits (retries).
  EXPECT_EQ(cluster.RegisterWorker("h:4", "h", 4, 1).status().code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(cluster.group_epoch(), 0u);
  cluster.set_group_epoch(2);
  EXPECT_EQ(cluster.group_epoch(), 2u);
}

// A rank freed for a rejoin is listed, with when the wait began and ends,
// until a worker registers for it (one that asked for any rank included).
TEST(ClusterStateTest, ListsRanksWaitingForARejoin) {
  ClusterState cluster(3);
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(cluster.RegisterWorker(absl::StrCat("h:", r), "h", r, r).ok());
  }
  EXPECT_TRUE(cluster.RejoinWaits().empty());
  const absl::Time before = absl::Now();
  const absl::Time deadline = before + absl::Seconds(60);
  cluster.ExpectRejoin(Rank(1), deadline, "h:1");  // still registered: not waiting
  EXPECT_TRUE(cluster.RejoinWaits().empty());
  cluster.ForgetWorker(Rank(2));
  cluster.ForgetWorker(Rank(1));
  cluster.ExpectRejoin(Rank(2), deadline, "h:2");
  cluster.ExpectRejoin(Rank(1), deadline, "h:1");
  std::vector<RejoinWait> waits = cluster.RejoinWaits();
  ASSERT_EQ(waits.size(), 2u);
  EXPECT_EQ(waits[0].rank, Rank(1));
  EXPECT_EQ(waits[0].previous_address, "h:1");
  EXPECT_GE(waits[0].since, before);
  EXPECT_LE(waits[0].since, absl::Now());
  EXPECT_EQ(waits[0].deadline, deadline);
  EXPECT_EQ(waits[1].rank, Rank(2));
  // A worker asking for any rank takes the lowest free one, 1.
  EXPECT_EQ(*cluster.RegisterWorker("h:9", "h", 9, -1), Rank(1));
  waits = cluster.RejoinWaits();
  ASSERT_EQ(waits.size(), 1u);
  EXPECT_EQ(waits[0].rank, Rank(2));
  cluster.ClearRejoinWaits();
  EXPECT_TRUE(cluster.RejoinWaits().empty());
}

// With rejoins (remote workers, recovery on) a worker that finds every rank
// held retries instead of exiting, whether or not it asked for a rank: its
// lost predecessor may not be found lost yet (or it is a spare). So does a
// worker whose address is still registered to another process.
TEST(ClusterStateTest, WithRejoinsAWorkerFindingNoFreeRankRetries) {
  ClusterState cluster(2);
  ASSERT_TRUE(cluster.RegisterWorker("h:1", "h", 1, 0).ok());
  ASSERT_TRUE(cluster.RegisterWorker("h:2", "h", 2, 1).ok());
  EXPECT_EQ(cluster.RegisterWorker("h:3", "h", 3, -1).status().code(),
            absl::StatusCode::kResourceExhausted);  // without rejoins: refused for good
  cluster.set_rejoin_enabled(true);
  const absl::Status unpinned = cluster.RegisterWorker("h:3", "h", 3, -1).status();
  EXPECT_EQ(unpinned.code(), absl::StatusCode::kUnavailable) << unpinned;
  EXPECT_EQ(cluster.RegisterWorker("h:2", "h", 4, -1).status().code(),
            absl::StatusCode::kUnavailable);  // h:2's old holder is gone
  // The same process again (its first reply was lost): the same rank.
  EXPECT_EQ(*cluster.RegisterWorker("h:2", "h", 2, -1), Rank(1));
  EXPECT_EQ(*cluster.RegisterWorker("h:2", "h", 2, 1), Rank(1));
  cluster.ForgetWorker(Rank(1));
  EXPECT_EQ(*cluster.RegisterWorker("h:3", "h", 3, -1), Rank(1));
}

TEST(ClusterStateTest, KeepsTheKvMemoryWorkersReport) {
  ClusterState cluster(2);
  ASSERT_TRUE(cluster.RegisterWorker("h:1", "h", 1, 0).ok());
  EXPECT_EQ(cluster.Workers()[0].kv.num_blocks, 0);  // nothing reported yet
  ASSERT_TRUE(cluster
                  .SetWorkerKv(Rank(0), {.block_tokens = 64, .compress_ratios = {2, 1},
                                         .num_blocks = 100, .num_seq_slots = 8})
                  .ok());
  EXPECT_EQ(cluster.Workers()[0].kv.num_blocks, 100);
  EXPECT_EQ(cluster.Workers()[0].kv.compress_ratios, (std::vector<int32_t>{2, 1}));
  EXPECT_EQ(cluster.SetWorkerKv(Rank(1), {}).code(), absl::StatusCode::kNotFound);
}

TEST(ClusterStateTest, RejectsBadRegistrations) {
  ClusterState cluster(2);
  EXPECT_EQ(cluster.RegisterWorker("", "h", 1, -1).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(cluster.RegisterWorker("h:1", "h", 1, 2).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(cluster.RegisterWorker("h:1", "h", 1, -7).status().code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(cluster.RegisterWorker("h:1", "h", 1, -1).ok());
  EXPECT_EQ(cluster.RegisterWorker("h:1", "h", 2, -1).status().code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_FALSE(cluster.WaitAllRegistered(absl::Milliseconds(10)));
}

TEST(ClusterStateTest, WaitAllRegisteredWakesOnLastRegistration) {
  ClusterState cluster(2);
  ASSERT_TRUE(cluster.RegisterWorker("h:1", "h", 1, -1).ok());
  std::thread late([&] {
    absl::SleepFor(absl::Milliseconds(50));
    ASSERT_TRUE(cluster.RegisterWorker("h:2", "h", 2, -1).ok());
  });
  EXPECT_TRUE(cluster.WaitAllRegistered(absl::Seconds(10)));
  late.join();
}

TEST(ClusterStateTest, DeadIsFinalAndDegradesTheCluster) {
  ClusterState cluster(2);
  ASSERT_TRUE(cluster.RegisterWorker("h:1", "h", 100, 0).ok());
  ASSERT_TRUE(cluster.RegisterWorker("h:2", "h", 200, 1).ok());
  EXPECT_FALSE(cluster.AllReady());
  ASSERT_TRUE(cluster.SetWorkerStatus(Rank(0), WorkerStatus::kReady, "").ok());
  ASSERT_TRUE(cluster.SetWorkerStatus(Rank(1), WorkerStatus::kReady, "").ok());
  EXPECT_TRUE(cluster.AllReady());
  cluster.set_lifecycle(ClusterLifecycle::kReady);

  EXPECT_EQ(*cluster.RankOfPid(200), Rank(1));
  ASSERT_TRUE(cluster.SetWorkerStatus(Rank(1), WorkerStatus::kDead, "killed by signal 9").ok());
  EXPECT_EQ(cluster.lifecycle(), ClusterLifecycle::kDegraded);
  EXPECT_FALSE(cluster.AllReady());
  // A second report keeps the first cause; nothing revives the worker.
  ASSERT_TRUE(cluster.SetWorkerStatus(Rank(1), WorkerStatus::kDead, "health failed").ok());
  EXPECT_EQ(cluster.SetWorkerStatus(Rank(1), WorkerStatus::kReady, "").code(),
            absl::StatusCode::kFailedPrecondition);
  std::vector<WorkerRecord> workers = cluster.Workers();
  ASSERT_EQ(workers.size(), 2u);
  EXPECT_EQ(workers[1].status, WorkerStatus::kDead);
  EXPECT_EQ(workers[1].detail, "killed by signal 9");
  EXPECT_EQ(cluster.SetWorkerStatus(Rank(5), WorkerStatus::kReady, "").code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(cluster.RankOfPid(999).status().code(), absl::StatusCode::kNotFound);
}

TEST(ClusterStateTest, DeathDuringShutdownDoesNotDegrade) {
  ClusterState cluster(1);
  ASSERT_TRUE(cluster.RegisterWorker("h:1", "h", 1, 0).ok());
  cluster.set_lifecycle(ClusterLifecycle::kStopping);
  ASSERT_TRUE(cluster.SetWorkerStatus(Rank(0), WorkerStatus::kDead, "exited").ok());
  EXPECT_EQ(cluster.lifecycle(), ClusterLifecycle::kStopping);
}

}  // namespace
}  // namespace weir::coordinator
