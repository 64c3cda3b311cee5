// WorkerService's expert-map RPCs (worker_service.h, "Expert maps"):
// PrepareExpertMap stages the experts this rank will own, CommitStaged /
// CommitExpertMap switch to them at a step boundary. Split from
// worker_service.cc to keep each file under ~800 lines; same class.
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/grpc_util.h"
#include "base/logging.h"
#include "base/status_macros.h"
#include "parallel/ucx_communicator.h"
#include "worker/model/expert_parallel_model.h"
#include "worker/worker_service.h"
#include "worker/worker_service_internal.h"

namespace weir::worker {

using internal::Error;
using internal::FromProto;
using internal::ToPlacement;

grpc::Status WorkerService::PrepareExpertMap(grpc::ServerContext* context,
                                             const v1::PrepareExpertMapRequest* request,
                                             v1::PrepareExpertMapResponse* response) {
  if (grpc::Status s = CheckEpoch(request->coordinator_epoch()); !s.ok()) return s;
  if (grpc::Status s = CheckGroupEpoch(request->group_epoch(), "PrepareExpertMap"); !s.ok()) {
    return s;
  }
  absl::MutexLock staging_lock(&staging_mu_);
  ExpertMap current;
  int world = 0;
  {
    absl::MutexLock lock(&mu_);
    if (!experts_.has_value()) {
      return Error(grpc::StatusCode::FAILED_PRECONDITION,
                   "no expert map: model not loaded or has no routed experts");
    }
    if (!map_broken_.ok()) return ToGrpcStatus(map_broken_);
    if (absl::Status s = experts_->Prepare(FromProto(request->map()), world_size_); !s.ok()) {
      return ToGrpcStatus(s);
    }
    current = experts_->committed();
    world = world_size_;
  }
  const ExpertMap next = FromProto(request->map());
  staged_version_ = 0;
  staged_experts_ = {};
  const absl::Time start = absl::Now();
  if (world > 1) {
    if (staging_comm_ == nullptr) {
      if (staging_ucx_ == nullptr || static_cast<int>(staging_table_.size()) != world) {
        return Error(grpc::StatusCode::FAILED_PRECONDITION, "no expert staging plane");
      }
      for (const std::string& address : staging_table_) {
        if (address.empty()) {
          return Error(grpc::StatusCode::FAILED_PRECONDITION,
                       "a peer announced no expert staging address");
        }
      }
      // Collective: every rank's PrepareExpertMap connects here the first time.
      absl::StatusOr<std::unique_ptr<parallel::UcxCommunicator>> comm =
          parallel::UcxCommunicator::Create(
              *staging_ucx_, Rank(rank_), staging_table_,
              {.timeout = options_.collective_timeout, .abort = group_abort_.get()});
      if (!comm.ok()) return ToGrpcStatus(comm.status());
      if (absl::Status s = (*comm)->Barrier(); !s.ok()) return ToGrpcStatus(s);
      staging_comm_ = std::move(*comm);
    }
    const std::vector<model::ExpertMove> moves =
        model::PlanExpertMoves(ToPlacement(current, world), ToPlacement(next, world));
    absl::StatusOr<model::StagedExperts> staged = model::ExchangeExperts(
        *staging_comm_, moves, model_runtime_->weights(), current.num_layers);
    if (!staged.ok()) return ToGrpcStatus(staged.status());
    staged_experts_ = std::move(*staged);
  }
  staged_version_ = next.version;
  response->set_prepared_version(next.version);
  response->set_bytes_staged(staged_experts_.bytes_received);
  WEIR_LOG(INFO) << "rank " << rank_ << " prepared expert map " << next.version << ": "
                 << staged_experts_.experts.size() << " experts received ("
                 << staged_experts_.bytes_received << " bytes) in "
                 << absl::ToDoubleMilliseconds(absl::Now() - start) << " ms";
  return grpc::Status::OK;
}

absl::Status WorkerService::CommitStaged(uint64_t version) {
  absl::MutexLock staging_lock(&staging_mu_);
  absl::MutexLock lock(&mu_);
  if (!experts_.has_value()) {
    return absl::FailedPreconditionError("no expert map: model not loaded");
  }
  if (experts_->committed().version == version) return absl::OkStatus();
  if (experts_->staged_version() != version || staged_version_ != version) {
    return absl::AbortedError(absl::StrCat("expert map ", version,
                                           " was not prepared on this rank (committed ",
                                           experts_->committed().version, ")"));
  }
  if (ep_executor_ != nullptr) {
    // The staged map's placement: ExpertMapState validated it at prepare.
    absl::StatusOr<ExpertMap> next = experts_->staged();
    if (!next.ok()) return next.status();
    RETURN_IF_ERROR(model::InstallPlacement(*model_runtime_, *ep_executor_,
                                            ToPlacement(*next, world_size_),
                                            std::move(staged_experts_)));
    // The device decoder takes its new slots' experts from the model's
    // weights, which hold them now.
    if (device_decoder_ != nullptr) {
      RETURN_IF_ERROR(device_decoder_->SetPlacement(ToPlacement(*next, world_size_)));
    }
  }
  staged_experts_ = {};
  staged_version_ = 0;
  RETURN_IF_ERROR(experts_->Commit(version));
  WEIR_LOG(INFO) << "rank " << rank_ << " switched to expert map " << version;
  return absl::OkStatus();
}

grpc::Status WorkerService::CommitExpertMap(grpc::ServerContext* context,
                                            const v1::CommitExpertMapRequest* request,
                                            v1::CommitExpertMapResponse* response) {
  if (grpc::Status s = CheckGroupEpoch(request->group_epoch(), "CommitExpertMap"); !s.ok()) {
    return s;
  }
  {
    absl::MutexLock lock(&mu_);
    if (steps_active_) {
      return Error(grpc::StatusCode::FAILED_PRECONDITION,
                   "a Steps stream is open: commits ride on StepPlan.commit_expert_map");
    }
  }
  if (absl::Status s = CommitStaged(request->version()); !s.ok()) return ToGrpcStatus(s);
  absl::MutexLock lock(&mu_);
  response->set_committed_version(experts_->committed().version);
  return grpc::Status::OK;
}

}  // namespace weir::worker
