// coordinator/control_service.h
//
// ControlService implements weir.v1.Coordinator: workers and the EPLB service
// register here, and EPLB asks for expert-map commits.
//
// Thread safety: gRPC calls it from many threads; all state is in the
// thread-safe ClusterState / ClusterController.

#ifndef WEIR_COORDINATOR_CONTROL_SERVICE_H_
#define WEIR_COORDINATOR_CONTROL_SERVICE_H_

#include "coordinator/cluster_controller.h"
#include "coordinator/cluster_state.h"
#include "proto/worker.grpc.pb.h"

namespace weir::coordinator {

class ControlService final : public v1::Coordinator::Service {
 public:
  // Does not take ownership; both must outlive the service.
  ControlService(ClusterState& cluster, ClusterController& controller, uint64_t epoch)
      : cluster_(cluster), controller_(controller), epoch_(epoch) {}

  grpc::Status Register(grpc::ServerContext* context, const v1::RegisterRequest* request,
                        v1::RegisterResponse* response) override;
  grpc::Status CommitExpertMap(grpc::ServerContext* context,
                               const v1::CommitExpertMapRequest* request,
                               v1::CommitExpertMapResponse* response) override;

 private:
  ClusterState& cluster_;
  ClusterController& controller_;
  const uint64_t epoch_;
};

}  // namespace weir::coordinator

#endif  // WEIR_COORDINATOR_CONTROL_SERVICE_H_
