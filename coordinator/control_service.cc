#include "coordinator/control_service.h"

#include <algorithm>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "base/grpc_util.h"
#include "base/logging.h"

namespace weir::coordinator {

grpc::Status ControlService::Register(grpc::ServerContext* context,
                                      const v1::RegisterRequest* request,
                                      v1::RegisterResponse* response) {
  response->set_world_size(cluster_.world_size());
  response->set_coordinator_epoch(epoch_);
  response->set_group_epoch(cluster_.group_epoch());
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

namespace {

// Checks a proposed map against the committed one: same shape, every entry
// a logical expert, every logical expert with a slot in every layer.
absl::Status CheckProposedMap(const v1::ExpertMap& map, const v1::ExpertMap& current) {
  if (map.num_layers() != current.num_layers() || map.num_physical() != current.num_physical() ||
      map.num_logical() != current.num_logical() ||
      map.slots_per_rank() != current.slots_per_rank()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "expert map shape ", map.num_layers(), "x", map.num_physical(), " (", map.num_logical(),
        " logical, ", map.slots_per_rank(), " per rank) differs from the committed ",
        current.num_layers(), "x", current.num_physical(), " (", current.num_logical(), ", ",
        current.slots_per_rank(), ")"));
  }
  const size_t layers = map.num_layers(), physical = map.num_physical();
  if (static_cast<size_t>(map.physical_to_logical_size()) != layers * physical) {
    return absl::InvalidArgumentError(absl::StrCat("expert map has ",
                                                   map.physical_to_logical_size(),
                                                   " entries, want ", layers * physical));
  }
  for (size_t l = 0; l < layers; ++l) {
    std::vector<bool> seen(map.num_logical(), false);
    for (size_t p = 0; p < physical; ++p) {
      const int32_t e = map.physical_to_logical(static_cast<int>(l * physical + p));
      if (e < 0 || e >= static_cast<int32_t>(map.num_logical())) {
        return absl::InvalidArgumentError(
            absl::StrCat("expert map layer ", l, " slot ", p, " names expert ", e));
      }
      seen[e] = true;
    }
    for (size_t e = 0; e < seen.size(); ++e) {
      if (!seen[e]) {
        return absl::InvalidArgumentError(
            absl::StrCat("expert map layer ", l, " has no slot for expert ", e));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

v1::ExpertMap InitialExpertMap(int num_layers, int num_logical, int world_size, int redundant) {
  const int slots_per_rank = (num_logical + redundant + world_size - 1) / world_size;
  const int physical = slots_per_rank * world_size;
  v1::ExpertMap map;
  map.set_version(0);
  map.set_num_layers(num_layers);
  map.set_num_physical(physical);
  map.set_num_logical(num_logical);
  map.set_slots_per_rank(slots_per_rank);
  for (int l = 0; l < num_layers; ++l) {
    for (int p = 0; p < physical; ++p) map.add_physical_to_logical(p % num_logical);
  }
  return map;
}

grpc::Status ControlService::CommitExpertMap(grpc::ServerContext* context,
                                             const v1::CommitExpertMapRequest* request,
                                             v1::CommitExpertMapResponse* response) {
  StepDriver* driver = driver_.load();
  if (driver == nullptr) {
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, "CommitExpertMap: not serving yet");
  }
  const v1::ExpertMap current = cluster_.expert_map();
  if (request->version() <= current.version()) {
    return grpc::Status(grpc::StatusCode::ABORTED,
                        absl::StrCat("CommitExpertMap: version ", request->version(),
                                     " is not newer than the committed ", current.version()));
  }
  if (request->map().version() != request->version()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        absl::StrCat("CommitExpertMap: version ", request->version(),
                                     " with a map of version ", request->map().version()));
  }
  if (absl::Status s = CheckProposedMap(request->map(), current); !s.ok()) {
    return ToGrpcStatus(s);
  }
  struct Outcome {
    absl::Notification done;
    absl::Status status;
  };
  auto outcome = std::make_shared<Outcome>();
  ClusterState& cluster = cluster_;
  v1::ExpertMap map = request->map();
  const uint64_t version = request->version();
  absl::Status queued = driver->CommitExpertMap(
      version, [outcome, &cluster, map = std::move(map)](absl::Status status) mutable {
        // Recorded even if the caller stopped waiting: the workers switched.
        if (status.ok()) cluster.set_expert_map(std::move(map));
        outcome->status = std::move(status);
        outcome->done.Notify();
      });
  if (!queued.ok()) return ToGrpcStatus(queued);
  absl::Duration wait = absl::Seconds(60);
  if (context != nullptr && context->deadline() != std::chrono::system_clock::time_point::max()) {
    wait = std::min(wait, absl::FromChrono(context->deadline()) - absl::Now());
  }
  if (!outcome->done.WaitForNotificationWithTimeout(wait)) {
    return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                        absl::StrCat("expert map ", version, " not switched in time"));
  }
  if (!outcome->status.ok()) return ToGrpcStatus(outcome->status);
  WEIR_LOG(INFO) << "expert map " << version << " committed on every worker";
  response->set_committed_version(version);
  return grpc::Status::OK;
}

grpc::Status ControlService::GetPlacement(grpc::ServerContext* context,
                                          const v1::GetPlacementRequest* request,
                                          v1::PlacementInfo* response) {
  response->set_coordinator_epoch(epoch_);
  const uint64_t group_epoch = cluster_.group_epoch();
  response->set_group_epoch(group_epoch);
  for (const WorkerRecord& w : cluster_.Workers()) {
    v1::PeerInfo* peer = response->add_workers();
    peer->set_rank(w.rank.value());
    peer->set_address(w.address);
    peer->set_hostname(w.hostname);
    peer->set_group_epoch(group_epoch);
  }
  if (!request->workers_only()) *response->mutable_committed_map() = cluster_.expert_map();
  if (StepDriver* driver = driver_.load(); driver != nullptr) {
    response->set_steps(static_cast<uint64_t>(driver->steps()));
  }
  return grpc::Status::OK;
}

}  // namespace weir::coordinator
