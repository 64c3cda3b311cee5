#include "coordinator/worker_client.h"

#include "base/grpc_util.h"

namespace weir::coordinator {
namespace {

void SetDeadline(grpc::ClientContext& context, absl::Duration timeout) {
  context.set_deadline(DeadlineIn(absl::ToChronoMilliseconds(timeout)));
}

}  // namespace

WorkerClient::WorkerClient(const std::string& address)
    : address_(address), channel_(MakeChannel(address)), stub_(v1::Worker::NewStub(channel_)) {}

absl::StatusOr<v1::InitResponse> WorkerClient::Init(const v1::InitRequest& request,
                                                    absl::Duration timeout) {
  grpc::ClientContext context;
  SetDeadline(context, timeout);
  v1::InitResponse response;
  grpc::Status status = stub_->Init(&context, request, &response);
  if (!status.ok()) return FromGrpcStatus(status);
  return response;
}

absl::StatusOr<v1::LoadWeightsResponse> WorkerClient::LoadWeights(
    const v1::LoadWeightsRequest& request, absl::Duration timeout) {
  grpc::ClientContext context;
  SetDeadline(context, timeout);
  v1::LoadWeightsResponse response;
  grpc::Status status = stub_->LoadWeights(&context, request, &response);
  if (!status.ok()) return FromGrpcStatus(status);
  return response;
}

absl::Status WorkerClient::Shutdown(const std::string& reason, absl::Duration timeout) {
  grpc::ClientContext context;
  SetDeadline(context, timeout);
  v1::ShutdownRequest request;
  request.set_reason(reason);
  v1::ShutdownResponse response;
  return FromGrpcStatus(stub_->Shutdown(&context, request, &response));
}

absl::StatusOr<std::string> WorkerClient::Health(absl::Duration timeout) {
  return CheckHealth(*channel_, "weir.v1.Worker", absl::ToChronoMilliseconds(timeout));
}

}  // namespace weir::coordinator
