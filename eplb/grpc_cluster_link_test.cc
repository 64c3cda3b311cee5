// The rebalancer over real gRPC: in-process Coordinator and Worker servers
// stand in for the cluster.

#include "eplb/grpc_cluster_link.h"

#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "base/grpc_util.h"
#include "eplb/expert_map.h"
#include "eplb/rebalancer.h"
#include "gtest/gtest.h"
#include "proto/worker.grpc.pb.h"

namespace weir::eplb {
namespace {

constexpr uint64_t kEpoch = 7;

// Every worker's PrepareExpertMap waits here until all of them were called,
// as the real ones wait for their peers' weights.
class Barrier {
 public:
  explicit Barrier(int parties) : parties_(parties) {}
  bool ArriveAndWait(absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    ++arrived_;
    auto all = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return arrived_ >= parties_; };
    return mu_.AwaitWithTimeout(absl::Condition(&all), timeout);
  }

 private:
  const int parties_;
  absl::Mutex mu_;
  int arrived_ ABSL_GUARDED_BY(mu_) = 0;
};

class FakeWorker final : public v1::Worker::Service {
 public:
  FakeWorker(int rank, Barrier* barrier, grpc::Status answer)
      : rank_(rank), barrier_(barrier), answer_(std::move(answer)) {}

  grpc::Status PrepareExpertMap(grpc::ServerContext*, const v1::PrepareExpertMapRequest* request,
                                v1::PrepareExpertMapResponse* response) override {
    {
      absl::MutexLock lock(&mu_);
      requests_.push_back(*request);
    }
    if (!barrier_->ArriveAndWait(absl::Seconds(5))) {
      return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "peers never came");
    }
    if (!answer_.ok()) return answer_;
    response->set_prepared_version(request->map().version());
    response->set_bytes_staged(100 * (rank_ + 1));
    return grpc::Status::OK;
  }

  std::vector<v1::PrepareExpertMapRequest> requests() {
    absl::MutexLock lock(&mu_);
    return requests_;
  }

 private:
  const int rank_;
  Barrier* const barrier_;
  const grpc::Status answer_;
  absl::Mutex mu_;
  std::vector<v1::PrepareExpertMapRequest> requests_ ABSL_GUARDED_BY(mu_);
};

class FakeCoordinator final : public v1::Coordinator::Service {
 public:
  grpc::Status GetPlacement(grpc::ServerContext*, const v1::GetPlacementRequest*,
                            v1::PlacementInfo* response) override {
    absl::MutexLock lock(&mu_);
    *response = placement_;
    return grpc::Status::OK;
  }
  grpc::Status CommitExpertMap(grpc::ServerContext*, const v1::CommitExpertMapRequest* request,
                               v1::CommitExpertMapResponse* response) override {
    absl::MutexLock lock(&mu_);
    commits_.push_back(*request);
    *placement_.mutable_committed_map() = request->map();
    response->set_committed_version(request->version());
    return grpc::Status::OK;
  }

  void AddWorker(int rank, const std::string& address) {
    absl::MutexLock lock(&mu_);
    placement_.set_coordinator_epoch(kEpoch);
    v1::PeerInfo* worker = placement_.add_workers();
    worker->set_rank(rank);
    worker->set_address(address);
  }
  std::vector<v1::CommitExpertMapRequest> commits() {
    absl::MutexLock lock(&mu_);
    return commits_;
  }

 private:
  absl::Mutex mu_;
  v1::PlacementInfo placement_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::CommitExpertMapRequest> commits_ ABSL_GUARDED_BY(mu_);
};

// [1 window, 1 layer, 4 experts], experts 0 and 1 (rank 0's) hot.
LoadSnapshot SkewedSnapshot() {
  absl::StatusOr<policy::ExpertLoad> load =
      policy::ExpertLoad::FromCounts(1, 1, 4, std::vector<int64_t>{50, 50, 1, 1});
  EXPECT_TRUE(load.ok());
  return LoadSnapshot{.load = *std::move(load)};
}

class GrpcClusterLinkTest : public ::testing::Test {
 protected:
  // Starts a coordinator and `world` workers; worker `failing` (if >= 0)
  // answers Prepare with `failure`.
  void StartCluster(int world, int failing = -1, grpc::Status failure = grpc::Status::OK) {
    barrier_ = std::make_unique<Barrier>(world);
    absl::StatusOr<StartedServer> coordinator =
        StartServer({.address = "127.0.0.1:0"}, {&coordinator_});
    ASSERT_TRUE(coordinator.ok()) << coordinator.status();
    coordinator_server_ = std::move(*coordinator);
    for (int r = 0; r < world; ++r) {
      workers_.push_back(std::make_unique<FakeWorker>(
          r, barrier_.get(), r == failing ? failure : grpc::Status::OK));
      absl::StatusOr<StartedServer> server =
          StartServer({.address = "127.0.0.1:0"}, {workers_.back().get()});
      ASSERT_TRUE(server.ok()) << server.status();
      coordinator_.AddWorker(r, server->address);
      worker_servers_.push_back(std::move(*server));
    }
  }

  void TearDown() override {
    for (StartedServer& server : worker_servers_) server.server->Shutdown();
    if (coordinator_server_.server != nullptr) coordinator_server_.server->Shutdown();
  }

  FakeCoordinator coordinator_;
  StartedServer coordinator_server_;
  std::unique_ptr<Barrier> barrier_;
  std::vector<std::unique_ptr<FakeWorker>> workers_;
  std::vector<StartedServer> worker_servers_;
};

TEST_F(GrpcClusterLinkTest, PreparesEveryWorkerConcurrentlyThenCommits) {
  StartCluster(2);
  GrpcClusterLink link(coordinator_server_.address);
  Rebalancer rebalancer(RebalancerOptions{}, &link);
  ASSERT_EQ(rebalancer.RebalanceOnce(SkewedSnapshot()), AttemptOutcome::kCommitted)
      << rebalancer.State().history.back().detail();
  for (const std::unique_ptr<FakeWorker>& worker : workers_) {
    std::vector<v1::PrepareExpertMapRequest> requests = worker->requests();
    ASSERT_EQ(requests.size(), 1u);
    EXPECT_EQ(requests[0].coordinator_epoch(), kEpoch);
    EXPECT_EQ(requests[0].map().version(), 1u);
    EXPECT_EQ(requests[0].map().slots_per_rank(), 2u);
  }
  std::vector<v1::CommitExpertMapRequest> commits = coordinator_.commits();
  ASSERT_EQ(commits.size(), 1u);
  EXPECT_EQ(commits[0].version(), 1u);
  EXPECT_EQ(commits[0].map().SerializeAsString(),
            workers_[0]->requests()[0].map().SerializeAsString());
  RebalancerState state = rebalancer.State();
  EXPECT_EQ(state.committed_version, 1u);
  EXPECT_EQ(state.history.back().bytes_moved(), 100u + 200u);
}

TEST_F(GrpcClusterLinkTest, WorkerErrorsKeepTheirCode) {
  StartCluster(2, /*failing=*/1,
               grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "no staging plane"));
  GrpcClusterLink link(coordinator_server_.address);
  Rebalancer rebalancer(RebalancerOptions{}, &link);
  EXPECT_EQ(rebalancer.RebalanceOnce(SkewedSnapshot()), AttemptOutcome::kFailed);
  EXPECT_TRUE(coordinator_.commits().empty());
  const std::string detail = rebalancer.State().history.back().detail();
  EXPECT_NE(detail.find("FAILED_PRECONDITION"), std::string::npos) << detail;
  EXPECT_NE(detail.find("rank 1"), std::string::npos) << detail;
  EXPECT_NE(detail.find("no staging plane"), std::string::npos) << detail;
}

TEST_F(GrpcClusterLinkTest, UnreachableCoordinatorFailsWithinTheDeadline) {
  // A server that is started and stopped leaves a port nobody listens on.
  absl::StatusOr<StartedServer> gone = StartServer({.address = "127.0.0.1:0"}, {&coordinator_});
  ASSERT_TRUE(gone.ok());
  const std::string address = gone->address;
  gone->server->Shutdown();
  gone->server->Wait();
  GrpcClusterLink link(address);
  absl::StatusOr<v1::PlacementInfo> info = link.GetPlacement(absl::Now() + absl::Seconds(2));
  EXPECT_TRUE(info.status().code() == absl::StatusCode::kUnavailable ||
              info.status().code() == absl::StatusCode::kDeadlineExceeded)
      << info.status();
}

}  // namespace
}  // namespace weir::eplb
