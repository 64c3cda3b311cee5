// coordinator/worker_client.h
//
// WorkerClient: the coordinator's typed calls into one worker's `Worker`
// service, each with a deadline. Converts gRPC errors to absl::Status.
//
// Thread safety: thread-safe (gRPC stubs are).

#ifndef WEIR_COORDINATOR_WORKER_CLIENT_H_
#define WEIR_COORDINATOR_WORKER_CLIENT_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/worker.grpc.pb.h"

namespace weir::coordinator {

class WorkerClient {
 public:
  explicit WorkerClient(const std::string& address);

  const std::string& address() const { return address_; }

  // Each call fails with the RPC's status (UNAVAILABLE when the worker is
  // unreachable, DEADLINE_EXCEEDED after `timeout`) or the worker's error.
  absl::StatusOr<v1::InitResponse> Init(const v1::InitRequest& request, absl::Duration timeout);
  absl::StatusOr<v1::LoadWeightsResponse> LoadWeights(const v1::LoadWeightsRequest& request,
                                                      absl::Duration timeout);
  absl::Status Shutdown(const std::string& reason, absl::Duration timeout);

  // grpc.health.v1 status of the worker's "weir.v1.Worker" service.
  absl::StatusOr<std::string> Health(absl::Duration timeout);

 private:
  std::string address_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Worker::Stub> stub_;
};

}  // namespace weir::coordinator

#endif  // WEIR_COORDINATOR_WORKER_CLIENT_H_
