#include "worker/rank_watch.h"

#include <string>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "base/grpc_util.h"
#include "gtest/gtest.h"
#include "proto/worker.grpc.pb.h"

namespace weir::worker {
namespace {

constexpr uint64_t kEpoch = 77;

v1::PlacementInfo Placement(uint64_t epoch, std::vector<std::pair<int, std::string>> workers) {
  v1::PlacementInfo placement;
  placement.set_coordinator_epoch(epoch);
  placement.set_group_epoch(2);
  for (const auto& [rank, address] : workers) {
    v1::PeerInfo* peer = placement.add_workers();
    peer->set_rank(rank);
    peer->set_address(address);
  }
  return placement;
}

TEST(RankWatchTest, SupersededWhenReplacedForgottenOrTheCoordinatorIsNew) {
  const RankIdentity me{.coordinator_epoch = kEpoch, .rank = 1, .address = "h:2"};
  EXPECT_EQ(SupersededBy(Placement(kEpoch, {{0, "h:1"}, {1, "h:2"}}), me), std::nullopt);
  const std::optional<std::string> replaced =
      SupersededBy(Placement(kEpoch, {{0, "h:1"}, {1, "h:9"}}), me);
  ASSERT_TRUE(replaced.has_value());
  EXPECT_NE(replaced->find("rank 1 is now held by the worker at h:9"), std::string::npos)
      << *replaced;
  const std::optional<std::string> forgotten = SupersededBy(Placement(kEpoch, {{0, "h:1"}}), me);
  ASSERT_TRUE(forgotten.has_value());
  EXPECT_NE(forgotten->find("no longer lists this worker"), std::string::npos) << *forgotten;
  const std::optional<std::string> new_run =
      SupersededBy(Placement(kEpoch + 1, {{0, "h:1"}, {1, "h:2"}}), me);
  ASSERT_TRUE(new_run.has_value());
  EXPECT_NE(new_run->find("new run"), std::string::npos) << *new_run;
}

// A coordinator whose placement the test changes.
class FakeCoordinator final : public v1::Coordinator::Service {
 public:
  void Set(v1::PlacementInfo placement) {
    absl::MutexLock lock(&mu_);
    placement_ = std::move(placement);
  }
  int calls() {
    absl::MutexLock lock(&mu_);
    return calls_;
  }
  bool saw_full_request() {
    absl::MutexLock lock(&mu_);
    return saw_full_request_;
  }
  grpc::Status GetPlacement(grpc::ServerContext*, const v1::GetPlacementRequest* request,
                            v1::PlacementInfo* response) override {
    absl::MutexLock lock(&mu_);
    ++calls_;
    saw_full_request_ |= !request->workers_only();
    *response = placement_;
    return grpc::Status::OK;
  }

 private:
  absl::Mutex mu_;
  v1::PlacementInfo placement_ ABSL_GUARDED_BY(mu_);
  int calls_ ABSL_GUARDED_BY(mu_) = 0;
  bool saw_full_request_ ABSL_GUARDED_BY(mu_) = false;
};

TEST(RankWatchTest, CallsBackOnceWhenAnotherWorkerTakesTheRank) {
  FakeCoordinator coordinator;
  coordinator.Set(Placement(kEpoch, {{0, "h:1"}, {1, "h:2"}}));
  absl::StatusOr<StartedServer> server = StartServer({.address = "127.0.0.1:0"}, {&coordinator});
  ASSERT_TRUE(server.ok()) << server.status();
  absl::Notification superseded;
  std::string why;
  int callbacks = 0;
  {
    RankWatch watch(server->address, {.coordinator_epoch = kEpoch, .rank = 1, .address = "h:2"},
                    absl::Milliseconds(20), [&](const std::string& reason) {
                      why = reason;
                      ++callbacks;
                      superseded.Notify();
                    });
    // Still this worker's rank: several polls, no callback.
    const absl::Time until = absl::Now() + absl::Seconds(60);
    while (coordinator.calls() < 5 && absl::Now() < until) absl::SleepFor(absl::Milliseconds(10));
    ASSERT_GE(coordinator.calls(), 5);
    EXPECT_FALSE(superseded.HasBeenNotified());
    coordinator.Set(Placement(kEpoch, {{0, "h:1"}, {1, "h:9"}}));
    ASSERT_TRUE(superseded.WaitForNotificationWithTimeout(absl::Seconds(60)));
    // It stops polling after the callback.
    const int calls = coordinator.calls();
    absl::SleepFor(absl::Milliseconds(200));
    EXPECT_EQ(coordinator.calls(), calls);
  }
  EXPECT_EQ(callbacks, 1);
  EXPECT_NE(why.find("h:9"), std::string::npos) << why;
  EXPECT_FALSE(coordinator.saw_full_request());  // the map is left out
  server->server->Shutdown();
}

}  // namespace
}  // namespace weir::worker
