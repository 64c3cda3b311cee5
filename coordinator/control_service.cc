#include "coordinator/control_service.h"

#include "base/grpc_util.h"
#include "base/logging.h"

namespace weir::coordinator {

grpc::Status ControlService::Register(grpc::ServerContext* context,
                                      const v1::RegisterRequest* request,
                                      v1::RegisterResponse* response) {
  response->set_world_size(cluster_.world_size());
  response->set_coordinator_epoch(epoch_);
  switch (request->role()) {
    case v1::PROCESS_ROLE_WORKER: {
      absl::StatusOr<Rank> rank = cluster_.RegisterWorker(
          request->address(), request->hostname(), request->pid(), request->requested_rank());
      if (!rank.ok()) {
        WEIR_LOG(WARNING) << "refused worker at " << request->address() << ": " << rank.status();
        return ToGrpcStatus(rank.status());
      }
      response->set_rank(rank->value());
      WEIR_LOG(INFO) << "worker " << request->address() << " (pid " << request->pid()
                     << ") registered as rank " << *rank;
      return grpc::Status::OK;
    }
    case v1::PROCESS_ROLE_EPLB:
      if (request->address().empty()) {
        return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "Register: empty address");
      }
      cluster_.RegisterEplb(request->address());
      response->set_rank(-1);
      WEIR_LOG(INFO) << "EPLB service registered at " << request->address();
      return grpc::Status::OK;
    default:
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          "Register: role must be WORKER or EPLB");
  }
}

grpc::Status ControlService::CommitExpertMap(grpc::ServerContext* context,
                                             const v1::CommitExpertMapRequest* request,
                                             v1::CommitExpertMapResponse* response) {
  if (request->version() <= cluster_.expert_map_version()) {
    return grpc::Status(grpc::StatusCode::ABORTED,
                        "CommitExpertMap: version " + std::to_string(request->version()) +
                            " is not newer than the committed " +
                            std::to_string(cluster_.expert_map_version()));
  }
  absl::Status status = controller_.CommitExpertMap(request->version());
  if (!status.ok()) return ToGrpcStatus(status);
  response->set_committed_version(request->version());
  return grpc::Status::OK;
}

}  // namespace weir::coordinator
