// worker/worker_service_internal.h — helpers that WorkerService's source
// files share (worker_service.cc, worker_service_expert_map.cc). Not for use
// outside the worker service.
#ifndef WEIR_WORKER_WORKER_SERVICE_INTERNAL_H_
#define WEIR_WORKER_WORKER_SERVICE_INTERNAL_H_

#include <string>

#include "grpcpp/grpcpp.h"
#include "worker/model/expert_placement.h"
#include "worker/worker_service.h"

namespace weir::worker::internal {

grpc::Status Error(grpc::StatusCode code, const std::string& message);
// The proto's expert map as the worker keeps it.
ExpertMap FromProto(const v1::ExpertMap& proto);
// The model's placement of `map` over `world` ranks.
model::ExpertPlacement ToPlacement(const ExpertMap& map, int world);

}  // namespace weir::worker::internal

#endif  // WEIR_WORKER_WORKER_SERVICE_INTERNAL_H_
