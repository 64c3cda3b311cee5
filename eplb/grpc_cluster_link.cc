#include "eplb/grpc_cluster_link.h"

#include "absl/strings/str_cat.h"
#include "base/grpc_util.h"

namespace weir::eplb {
namespace {

void SetDeadline(grpc::ClientContext& context, absl::Time deadline) {
  context.set_deadline(absl::ToChronoTime(deadline));
}

absl::Status WithContext(const grpc::Status& status, const std::string& what) {
  absl::Status s = FromGrpcStatus(status);
  return absl::Status(s.code(), absl::StrCat(what, ": ", s.message()));
}

}  // namespace

GrpcClusterLink::GrpcClusterLink(const std::string& coordinator_address)
    : coordinator_(v1::Coordinator::NewStub(MakeChannel(coordinator_address))) {}

v1::Worker::Stub* GrpcClusterLink::WorkerStub(const std::string& address) {
  absl::MutexLock lock(&mu_);
  std::unique_ptr<v1::Worker::Stub>& stub = workers_[address];
  if (stub == nullptr) stub = v1::Worker::NewStub(MakeChannel(address));
  return stub.get();
}

absl::StatusOr<v1::PlacementInfo> GrpcClusterLink::GetPlacement(absl::Time deadline) {
  grpc::ClientContext context;
  SetDeadline(context, deadline);
  v1::PlacementInfo info;
  grpc::Status status = coordinator_->GetPlacement(&context, v1::GetPlacementRequest(), &info);
  if (!status.ok()) return WithContext(status, "Coordinator.GetPlacement");
  return info;
}

absl::StatusOr<v1::PrepareExpertMapResponse> GrpcClusterLink::Prepare(const v1::PeerInfo& worker,
                                                                      uint64_t epoch,
                                                                      const v1::ExpertMap& map,
                                                                      absl::Time deadline) {
  if (worker.address().empty()) {
    return absl::FailedPreconditionError(absl::StrCat("rank ", worker.rank(), " has no address"));
  }
  v1::Worker::Stub* stub = WorkerStub(worker.address());
  grpc::ClientContext context;
  SetDeadline(context, deadline);
  v1::PrepareExpertMapRequest request;
  request.set_coordinator_epoch(epoch);
  request.set_group_epoch(worker.group_epoch());  // the fence of the worker's group
  *request.mutable_map() = map;
  v1::PrepareExpertMapResponse response;
  grpc::Status status = stub->PrepareExpertMap(&context, request, &response);
  if (!status.ok()) {
    return WithContext(status, absl::StrCat("Worker.PrepareExpertMap on rank ", worker.rank(),
                                            " at ", worker.address()));
  }
  return response;
}

absl::StatusOr<v1::CommitExpertMapResponse> GrpcClusterLink::Commit(uint64_t version,
                                                                    const v1::ExpertMap& map,
                                                                    absl::Time deadline) {
  grpc::ClientContext context;
  SetDeadline(context, deadline);
  v1::CommitExpertMapRequest request;
  request.set_version(version);
  *request.mutable_map() = map;
  v1::CommitExpertMapResponse response;
  grpc::Status status = coordinator_->CommitExpertMap(&context, request, &response);
  if (!status.ok()) return WithContext(status, "Coordinator.CommitExpertMap");
  return response;
}

}  // namespace weir::eplb
