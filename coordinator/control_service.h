// coordinator/control_service.h
//
// ControlService implements weir.v1.Coordinator: workers and the EPLB service
// register here; EPLB reads the placement (workers, epoch, committed expert
// map) and asks for expert-map commits, which the step loop applies at a
// step boundary (StepDriver::CommitExpertMap). A commit is answered once
// every worker ran the step that switched it; the map then becomes the
// cluster's committed map.
//
// Thread safety: gRPC calls it from many threads; all state is in the
// thread-safe ClusterState / ClusterController, and the driver pointer is
// atomic.

#ifndef WEIR_COORDINATOR_CONTROL_SERVICE_H_
#define WEIR_COORDINATOR_CONTROL_SERVICE_H_

#include "coordinator/cluster_controller.h"
#include <atomic>

#include "coordinator/cluster_state.h"
#include "coordinator/step_driver.h"
#include "proto/worker.grpc.pb.h"

namespace weir::coordinator {

// The initial expert map (version 0): num_logical + redundant slots rounded
// up to a multiple of world_size, slot p holding logical expert p mod
// num_logical in every layer (the first experts get the extra replicas).
// REQUIRES: num_layers, num_logical, world_size >= 1, redundant >= 0.
v1::ExpertMap InitialExpertMap(int num_layers, int num_logical, int world_size, int redundant);

class ControlService final : public v1::Coordinator::Service {
 public:
  // Does not take ownership; both must outlive the service.
  ControlService(ClusterState& cluster, ClusterController& controller, uint64_t epoch)
      : cluster_(cluster), controller_(controller), epoch_(epoch) {}

  grpc::Status Register(grpc::ServerContext* context, const v1::RegisterRequest* request,
                        v1::RegisterResponse* response) override;
  // UNAVAILABLE until SetDriver; INVALID_ARGUMENT for a map of another
  // shape than the committed one (or malformed); ABORTED for a version not
  // newer than the committed one; DEADLINE_EXCEEDED if the switch did not
  // happen within the call's deadline (at most 60 s).
  grpc::Status CommitExpertMap(grpc::ServerContext* context,
                               const v1::CommitExpertMapRequest* request,
                               v1::CommitExpertMapResponse* response) override;
  grpc::Status GetPlacement(grpc::ServerContext* context, const v1::GetPlacementRequest* request,
                            v1::PlacementInfo* response) override;

  // The step loop that applies commits (null: not serving).
  void SetDriver(StepDriver* driver) { driver_.store(driver); }

 private:
  ClusterState& cluster_;
  ClusterController& controller_;
  const uint64_t epoch_;
  std::atomic<StepDriver*> driver_{nullptr};
};

}  // namespace weir::coordinator

#endif  // WEIR_COORDINATOR_CONTROL_SERVICE_H_
