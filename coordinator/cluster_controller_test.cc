// ClusterController against an in-process fake worker (gRPC on loopback):
// BringUp records the KV memory the worker reports and marks it READY; the
// liveness monitor marks a worker whose health turns NOT_SERVING dead and
// calls back, also after a StopMonitor / StartMonitor pair (a worker-group
// recovery restarts it); ReportExit marks the rank of a pid dead.

#include "coordinator/cluster_controller.h"

#include <atomic>
#include <memory>
#include <string>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "base/grpc_util.h"
#include "gtest/gtest.h"
#include "proto/worker.grpc.pb.h"

namespace weir::coordinator {
namespace {

class FakeWorker final : public v1::Worker::Service {
 public:
  grpc::Status Init(grpc::ServerContext*, const v1::InitRequest* request,
                    v1::InitResponse*) override {
    inits_ += request->rank() == 0;
    return grpc::Status::OK;
  }
  grpc::Status LoadWeights(grpc::ServerContext*, const v1::LoadWeightsRequest*,
                           v1::LoadWeightsResponse* response) override {
    v1::KvCacheInfo* kv = response->mutable_kv_cache();
    kv->set_block_tokens(64);
    kv->add_compress_ratios(1);
    kv->set_num_blocks(100);
    kv->set_num_seq_slots(8);
    response->set_model_name("fake");
    return grpc::Status::OK;
  }
  int inits() const { return inits_; }

 private:
  std::atomic<int> inits_{0};
};

class ClusterControllerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<StartedServer> started =
        StartServer(ServerOptions{.address = "127.0.0.1:0"}, {&worker_});
    ASSERT_TRUE(started.ok()) << started.status();
    server_ = std::move(started->server);
    address_ = started->address;
    server_->GetHealthCheckService()->SetServingStatus("weir.v1.Worker", true);
    ASSERT_TRUE(cluster_.RegisterWorker(address_, "localhost", /*pid=*/4242, 0).ok());
    controller_ = std::make_unique<ClusterController>(
        cluster_, ControllerOptions{.model_dir = "unused",
                                    .health_interval = absl::Milliseconds(20),
                                    .health_timeout = absl::Milliseconds(500),
                                    .failure_threshold = 2});
  }
  void TearDown() override {
    controller_->StopMonitor();
    controller_.reset();
    server_->Shutdown();
  }
  WorkerStatus Status() { return cluster_.Workers().at(0).status; }
  // Waits up to 10 s for `pred`.
  bool WaitFor(const std::function<bool()>& pred) {
    const absl::Time until = absl::Now() + absl::Seconds(10);
    while (absl::Now() < until) {
      if (pred()) return true;
      absl::SleepFor(absl::Milliseconds(5));
    }
    return false;
  }

  FakeWorker worker_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
  ClusterState cluster_{1};
  std::unique_ptr<ClusterController> controller_;
};

TEST_F(ClusterControllerTest, BringUpRecordsTheWorkersKvAndMarksItReady) {
  ASSERT_TRUE(controller_->BringUp().ok());
  EXPECT_EQ(worker_.inits(), 1);
  EXPECT_EQ(Status(), WorkerStatus::kReady);
  EXPECT_EQ(cluster_.Workers().at(0).kv.num_blocks, 100);
  EXPECT_EQ(cluster_.Workers().at(0).kv.block_tokens, 64);
  EXPECT_TRUE(cluster_.AllReady());
}

TEST_F(ClusterControllerTest, RestartedMonitorStillMarksAFailingWorkerDead) {
  ASSERT_TRUE(controller_->BringUp().ok());
  std::atomic<int> changes{0};
  controller_->StartMonitor([&] { ++changes; });
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_EQ(Status(), WorkerStatus::kReady);  // healthy: nothing happens
  controller_->StopMonitor();
  controller_->StartMonitor([&] { ++changes; });
  server_->GetHealthCheckService()->SetServingStatus("weir.v1.Worker", false);
  ASSERT_TRUE(WaitFor([&] { return Status() == WorkerStatus::kDead; }))
      << "the restarted monitor did not notice";
  // The monitor marks the rank dead before it calls back: wait for the call too.
  EXPECT_TRUE(WaitFor([&] { return changes.load() >= 1; })) << "no change callback";
  EXPECT_NE(cluster_.Workers().at(0).detail.find("health check failed"), std::string::npos)
      << cluster_.Workers().at(0).detail;
  EXPECT_EQ(cluster_.lifecycle(), ClusterLifecycle::kDegraded);
}

TEST_F(ClusterControllerTest, ReportExitMarksTheRankOfThePidDead) {
  ASSERT_TRUE(controller_->BringUp().ok());
  controller_->ReportExit(/*pid=*/999, "exited with code 0");  // not ours: no-op
  EXPECT_EQ(Status(), WorkerStatus::kReady);
  controller_->ReportExit(/*pid=*/4242, "killed by signal 9 (Killed)");
  EXPECT_EQ(Status(), WorkerStatus::kDead);
  EXPECT_NE(cluster_.Workers().at(0).detail.find("signal 9"), std::string::npos);
  // A replacement group registers after ClearWorkers.
  cluster_.ClearWorkers();
  EXPECT_TRUE(cluster_.Workers().empty());
  EXPECT_TRUE(cluster_.RegisterWorker(address_, "localhost", 4343, 0).ok());
  EXPECT_EQ(Status(), WorkerStatus::kRegistered);
}

}  // namespace
}  // namespace weir::coordinator
