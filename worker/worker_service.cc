#include "worker/worker_service.h"

#include <filesystem>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "base/grpc_util.h"
#include "base/logging.h"
#include "worker/step_sequencer.h"

namespace weir::worker {
namespace {

grpc::Status Error(grpc::StatusCode code, const std::string& message) {
  return grpc::Status(code, message);
}

ExpertMap FromProto(const v1::ExpertMap& proto) {
  ExpertMap map;
  map.version = proto.version();
  map.num_layers = static_cast<int>(proto.num_layers());
  map.num_physical = static_cast<int>(proto.num_physical());
  map.num_logical = static_cast<int>(proto.num_logical());
  map.slots_per_rank = static_cast<int>(proto.slots_per_rank());
  map.physical_to_logical.assign(proto.physical_to_logical().begin(),
                                 proto.physical_to_logical().end());
  return map;
}

}  // namespace

WorkerService::WorkerService(WorkerHooks hooks) : hooks_(std::move(hooks)) {}

void WorkerService::SetIdentity(uint64_t epoch, int rank) {
  epoch_ = epoch;
  rank_ = rank;
  identity_set_.Notify();
}

grpc::Status WorkerService::CheckEpoch(uint64_t epoch) {
  if (!identity_set_.WaitForNotificationWithTimeout(absl::Seconds(10))) {
    return Error(grpc::StatusCode::UNAVAILABLE, "worker has not finished registering");
  }
  if (epoch == epoch_) return grpc::Status::OK;
  return Error(grpc::StatusCode::ABORTED,
               absl::StrCat("coordinator epoch ", epoch, " is not this worker's ", epoch_));
}

grpc::Status WorkerService::Init(grpc::ServerContext* context, const v1::InitRequest* request,
                                 v1::InitResponse* response) {
  if (grpc::Status s = CheckEpoch(request->coordinator_epoch()); !s.ok()) return s;
  const int world = static_cast<int>(request->layout().world_size());
  if (request->rank() != rank_) {
    return Error(grpc::StatusCode::INVALID_ARGUMENT,
                 absl::StrCat("Init for rank ", request->rank(), " sent to rank ", rank_));
  }
  if (world < 1 || rank_ >= world || request->peers_size() != world) {
    return Error(grpc::StatusCode::INVALID_ARGUMENT,
                 absl::StrCat("Init: world size ", world, " with ", request->peers_size(),
                              " peers does not fit rank ", rank_));
  }
  std::vector<std::string> peers(world);
  absl::flat_hash_set<int> seen;
  for (const v1::PeerInfo& peer : request->peers()) {
    if (peer.rank() < 0 || peer.rank() >= world || !seen.insert(peer.rank()).second) {
      return Error(grpc::StatusCode::INVALID_ARGUMENT,
                   absl::StrCat("Init: peer rank ", peer.rank(), " is out of range or repeated"));
    }
    peers[peer.rank()] = peer.address();
  }
  absl::MutexLock lock(&mu_);
  if (initialized_ && (world != world_size_ || peers != peer_addresses_)) {
    return Error(grpc::StatusCode::FAILED_PRECONDITION,
                 "Init: already initialized with a different layout");
  }
  initialized_ = true;
  world_size_ = world;
  peer_addresses_ = std::move(peers);
  WEIR_LOG(INFO) << "rank " << rank_ << " of " << world << " initialized";
  return grpc::Status::OK;
}

grpc::Status WorkerService::LoadWeights(grpc::ServerContext* context,
                                        const v1::LoadWeightsRequest* request,
                                        v1::LoadWeightsResponse* response) {
  if (grpc::Status s = CheckEpoch(request->coordinator_epoch()); !s.ok()) return s;
  int world = 0;
  {
    absl::MutexLock lock(&mu_);
    if (!initialized_) {
      return Error(grpc::StatusCode::FAILED_PRECONDITION, "LoadWeights before Init");
    }
    world = world_size_;
  }
  absl::StatusOr<ModelSummary> model = LoadModelSummary(request->model_dir());
  if (!model.ok()) return ToGrpcStatus(model.status());
  std::optional<ExpertMapState> experts;
  if (request->has_expert_map()) {
    ExpertMap map = FromProto(request->expert_map());
    if (absl::Status s = ValidateExpertMap(map, world); !s.ok()) return ToGrpcStatus(s);
    experts.emplace(std::move(map));
  } else if (model->num_routed_experts > 0 && model->num_routed_experts % world == 0) {
    experts.emplace(IdentityExpertMap(static_cast<int>(model->num_layers),
                                      static_cast<int>(model->num_routed_experts), world));
  }
  std::error_code ec;
  const auto config_bytes =
      std::filesystem::file_size(std::filesystem::path(request->model_dir()) / "config.json", ec);
  response->set_model_name(model->name);
  response->set_revision(model->revision);
  response->set_bytes_loaded(ec ? 0 : config_bytes);
  {
    absl::MutexLock lock(&mu_);
    model_ = std::move(*model);
    experts_ = std::move(experts);
  }
  if (hooks_.set_serving) hooks_.set_serving(true);
  return grpc::Status::OK;
}

void WorkerService::ExecutePlan(const v1::StepPlan& plan, v1::StepResult& result) {
  result.set_step_id(plan.step_id());
  if (plan.rows_size() > 0) {
    result.mutable_error()->set_code(static_cast<int>(grpc::StatusCode::UNIMPLEMENTED));
    result.mutable_error()->set_message(
        "this worker has no model forward built in; only empty steps run");
    return;
  }
  // An empty plan: this rank has no rows this step. Nothing to compute.
}

grpc::Status WorkerService::Steps(grpc::ServerContext* context,
                                  grpc::ServerReaderWriter<v1::StepResult, v1::StepPlan>* stream) {
  {
    absl::MutexLock lock(&mu_);
    if (!model_.has_value()) {
      return Error(grpc::StatusCode::FAILED_PRECONDITION, "Steps before LoadWeights");
    }
    if (steps_active_) {
      return Error(grpc::StatusCode::FAILED_PRECONDITION, "a Steps stream is already open");
    }
    steps_active_ = true;
  }
  if (grpc::Status s = CheckEpoch(epoch_); !s.ok()) return s;  // Waits for identity.
  StepSequencer sequencer(epoch_);
  v1::StepPlan plan;
  grpc::Status outcome = grpc::Status::OK;
  while (stream->Read(&plan)) {
    if (absl::Status s = sequencer.Accept(plan.coordinator_epoch(), plan.step_id()); !s.ok()) {
      outcome = ToGrpcStatus(s);  // A broken sequence ends the stream.
      break;
    }
    v1::StepResult result;
    ExecutePlan(plan, result);
    if (!stream->Write(result)) break;
  }
  absl::MutexLock lock(&mu_);
  steps_active_ = false;
  return outcome;
}

grpc::Status WorkerService::PrepareExpertMap(grpc::ServerContext* context,
                                             const v1::PrepareExpertMapRequest* request,
                                             v1::PrepareExpertMapResponse* response) {
  if (grpc::Status s = CheckEpoch(request->coordinator_epoch()); !s.ok()) return s;
  absl::MutexLock lock(&mu_);
  if (!experts_.has_value()) {
    return Error(grpc::StatusCode::FAILED_PRECONDITION,
                 "no expert map: model not loaded or has no routed experts");
  }
  if (absl::Status s = experts_->Prepare(FromProto(request->map()), world_size_); !s.ok()) {
    return ToGrpcStatus(s);
  }
  response->set_prepared_version(request->map().version());
  // No expert weights are resident in this build, so nothing moves yet.
  response->set_bytes_staged(0);
  return grpc::Status::OK;
}

grpc::Status WorkerService::CommitExpertMap(grpc::ServerContext* context,
                                            const v1::CommitExpertMapRequest* request,
                                            v1::CommitExpertMapResponse* response) {
  absl::MutexLock lock(&mu_);
  if (!experts_.has_value()) {
    return Error(grpc::StatusCode::FAILED_PRECONDITION,
                 "no expert map: model not loaded or has no routed experts");
  }
  if (absl::Status s = experts_->Commit(request->version()); !s.ok()) return ToGrpcStatus(s);
  response->set_committed_version(experts_->committed().version);
  return grpc::Status::OK;
}

grpc::Status WorkerService::Shutdown(grpc::ServerContext* context,
                                     const v1::ShutdownRequest* request,
                                     v1::ShutdownResponse* response) {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return grpc::Status::OK;
    stopping_ = true;
  }
  WEIR_LOG(INFO) << "shutdown requested: " << request->reason();
  if (hooks_.set_serving) hooks_.set_serving(false);
  if (hooks_.request_stop) hooks_.request_stop(request->reason());
  return grpc::Status::OK;
}

}  // namespace weir::worker
