// worker/worker_service_internal.h — helpers that WorkerService's source
// files share (worker_service.cc, worker_service_expert_map.cc,
// worker_service_device.cc). Not for use
// outside the worker service.
#ifndef WEIR_WORKER_WORKER_SERVICE_INTERNAL_H_
#define WEIR_WORKER_WORKER_SERVICE_INTERNAL_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "grpcpp/grpcpp.h"
#include "worker/model/cuda_ops.h"
#include "worker/model/device_arena.h"
#include "worker/model/expert_placement.h"
#include "worker/worker_service.h"

namespace weir::worker::internal {

grpc::Status Error(grpc::StatusCode code, const std::string& message);
// The proto's expert map as the worker keeps it.
ExpertMap FromProto(const v1::ExpertMap& proto);
// The model's placement of `map` over `world` ranks.
model::ExpertPlacement ToPlacement(const ExpertMap& map, int world);

// Device setup (worker_service_device.cc). The CUDA device of `rank`: rank
// mod the devices this process sees.
absl::StatusOr<int> CudaDeviceOfRank(int rank);
// The worker's one device allocation: `fraction` of the device, at most what
// is free less a margin for what libraries allocate themselves.
absl::StatusOr<std::shared_ptr<model::DeviceArena>> WorkerArena(int device, double fraction);
// The CUDA ops' blocks: the per-call arena and a weight region of `share` of
// the worker's arena (the rest goes to the device decoder).
absl::StatusOr<model::CudaOpsOptions> CudaOpsOptionsFor(std::shared_ptr<model::DeviceArena> memory,
                                                        double share);

}  // namespace weir::worker::internal

#endif  // WEIR_WORKER_WORKER_SERVICE_INTERNAL_H_
