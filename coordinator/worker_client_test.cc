// WorkerClient against an in-process fake Worker service on loopback: the
// requests reach the worker as sent and the responses come back; a worker's
// error keeps its code and message; a call past its timeout is
// DEADLINE_EXCEEDED; an address nobody serves is UNAVAILABLE; Health reports
// the "weir.v1.Worker" serving status the worker publishes.

#include "coordinator/worker_client.h"

#include <memory>
#include <string>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "base/grpc_util.h"
#include "gtest/gtest.h"
#include "proto/worker.grpc.pb.h"

namespace weir::coordinator {
namespace {

// Records what it was sent; answers LoadWeights with `load_error` when set;
// Init blocks until `release_init` is notified when `block_init` is set.
class FakeWorker final : public v1::Worker::Service {
 public:
  grpc::Status Init(grpc::ServerContext*, const v1::InitRequest* request,
                    v1::InitResponse* response) override {
    {
      absl::MutexLock lock(&mu_);
      last_init_ = *request;
    }
    if (block_init) {
      // Bounded, so a broken test cannot hang the server's shutdown.
      release_init.WaitForNotificationWithTimeout(absl::Seconds(60));
    }
    response->set_tensor_address("tensor@" + std::to_string(request->rank()));
    return grpc::Status::OK;
  }
  grpc::Status LoadWeights(grpc::ServerContext*, const v1::LoadWeightsRequest* request,
                           v1::LoadWeightsResponse* response) override {
    if (!load_error.ok()) return ToGrpcStatus(load_error);
    response->set_model_name("fake:" + request->model_dir());
    response->mutable_kv_cache()->set_num_blocks(100);
    return grpc::Status::OK;
  }
  grpc::Status Shutdown(grpc::ServerContext*, const v1::ShutdownRequest* request,
                        v1::ShutdownResponse*) override {
    absl::MutexLock lock(&mu_);
    shutdown_reasons_.push_back(request->reason());
    return grpc::Status::OK;
  }

  v1::InitRequest last_init() {
    absl::MutexLock lock(&mu_);
    return last_init_;
  }
  std::vector<std::string> shutdown_reasons() {
    absl::MutexLock lock(&mu_);
    return shutdown_reasons_;
  }

  absl::Status load_error;  // set before the call
  bool block_init = false;  // set before the call
  absl::Notification release_init;

 private:
  absl::Mutex mu_;
  v1::InitRequest last_init_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> shutdown_reasons_ ABSL_GUARDED_BY(mu_);
};

// Generous: a call that takes milliseconds must not fail on a loaded machine.
constexpr absl::Duration kTimeout = absl::Seconds(30);

class WorkerClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<StartedServer> started =
        StartServer(ServerOptions{.address = "127.0.0.1:0"}, {&worker_});
    ASSERT_TRUE(started.ok()) << started.status();
    server_ = std::move(started->server);
    client_ = std::make_unique<WorkerClient>(started->address);
  }
  void TearDown() override {
    worker_.release_init.Notify();  // a blocked Init returns, so Shutdown can finish
    server_->Shutdown();
  }

  FakeWorker worker_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<WorkerClient> client_;
};

TEST_F(WorkerClientTest, InitAndLoadWeightsCarryTheRequestAndTheResponse) {
  v1::InitRequest init;
  init.set_coordinator_epoch(7);
  init.set_rank(3);
  init.set_eplb_address("127.0.0.1:9");
  absl::StatusOr<v1::InitResponse> inited = client_->Init(init, kTimeout);
  ASSERT_TRUE(inited.ok()) << inited.status();
  EXPECT_EQ(inited->tensor_address(), "tensor@3");
  const v1::InitRequest seen = worker_.last_init();
  EXPECT_EQ(seen.coordinator_epoch(), 7u);
  EXPECT_EQ(seen.rank(), 3);
  EXPECT_EQ(seen.eplb_address(), "127.0.0.1:9");

  v1::LoadWeightsRequest load;
  load.set_model_dir("models/random/tiny");
  absl::StatusOr<v1::LoadWeightsResponse> loaded = client_->LoadWeights(load, kTimeout);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->model_name(), "fake:models/random/tiny");
  EXPECT_EQ(loaded->kv_cache().num_blocks(), 100);
}

TEST_F(WorkerClientTest, AWorkerErrorKeepsItsCodeAndMessage) {
  worker_.load_error = absl::FailedPreconditionError("LoadWeights before Init");
  absl::StatusOr<v1::LoadWeightsResponse> loaded =
      client_->LoadWeights(v1::LoadWeightsRequest(), kTimeout);
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kFailedPrecondition) << loaded.status();
  EXPECT_EQ(loaded.status().message(), "LoadWeights before Init");
}

TEST_F(WorkerClientTest, ShutdownSendsTheReason) {
  EXPECT_TRUE(client_->Shutdown("drained", kTimeout).ok());
  EXPECT_EQ(worker_.shutdown_reasons(), std::vector<std::string>{"drained"});
}

TEST_F(WorkerClientTest, ACallPastItsTimeoutIsDeadlineExceeded) {
  worker_.block_init = true;
  const absl::Time start = absl::Now();
  absl::StatusOr<v1::InitResponse> inited =
      client_->Init(v1::InitRequest(), absl::Milliseconds(200));
  EXPECT_EQ(inited.status().code(), absl::StatusCode::kDeadlineExceeded) << inited.status();
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(200));  // never early
}

TEST_F(WorkerClientTest, HealthReportsTheWorkerServiceStatus) {
  server_->GetHealthCheckService()->SetServingStatus("weir.v1.Worker", false);
  absl::StatusOr<std::string> health = client_->Health(kTimeout);
  ASSERT_TRUE(health.ok()) << health.status();
  EXPECT_EQ(*health, "NOT_SERVING");
  server_->GetHealthCheckService()->SetServingStatus("weir.v1.Worker", true);
  health = client_->Health(kTimeout);
  ASSERT_TRUE(health.ok()) << health.status();
  EXPECT_EQ(*health, "SERVING");
}

TEST(WorkerClientUnreachableTest, AnAddressNobodyServesIsUnavailable) {
  // A port that was just bound and released: nothing listens there.
  FakeWorker worker;
  absl::StatusOr<StartedServer> started =
      StartServer(ServerOptions{.address = "127.0.0.1:0"}, {&worker});
  ASSERT_TRUE(started.ok()) << started.status();
  const std::string address = started->address;
  started->server->Shutdown();
  started->server->Wait();
  started->server.reset();

  WorkerClient client(address);
  EXPECT_EQ(client.Shutdown("gone", kTimeout).code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(client.Health(kTimeout).status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(client.address(), address);
}

}  // namespace
}  // namespace weir::coordinator
