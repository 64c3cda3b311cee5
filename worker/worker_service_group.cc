// WorkerService's identity and group epoch (worker_service.h, "Group
// epoch"): the coordinator epoch and rank it serves, the checks that refuse a
// call of another group, and the end of an old group's work (EndGroupWork,
// Fence, ResetForNewGroup). Split from worker_service.cc to keep each file
// under ~800 lines; same class.
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/logging.h"
#include "worker/worker_service.h"
#include "worker/worker_service_internal.h"

namespace weir::worker {

using internal::Error;

void WorkerService::SetIdentity(uint64_t epoch, int rank) {
  epoch_ = epoch;
  rank_ = rank;
  identity_set_.Notify();
}

grpc::Status WorkerService::CheckEpoch(uint64_t epoch) {
  if (!identity_set_.WaitForNotificationWithTimeout(absl::Seconds(10))) {
    return Error(grpc::StatusCode::UNAVAILABLE, "worker has not finished registering");
  }
  {
    absl::MutexLock lock(&mu_);
    if (!fenced_.empty()) {
      return Error(grpc::StatusCode::FAILED_PRECONDITION,
                   absl::StrCat("this worker is fenced off: ", fenced_));
    }
  }
  if (epoch == epoch_) return grpc::Status::OK;
  return Error(grpc::StatusCode::ABORTED,
               absl::StrCat("coordinator epoch ", epoch, " is not this worker's ", epoch_));
}

grpc::Status WorkerService::CheckGroupEpoch(uint64_t group_epoch, const std::string& what) {
  absl::MutexLock lock(&mu_);
  return CheckGroupEpochLocked(group_epoch, what);
}

grpc::Status WorkerService::CheckGroupEpochLocked(uint64_t group_epoch, const std::string& what) {
  if (group_epoch == group_epoch_) return grpc::Status::OK;
  return Error(grpc::StatusCode::FAILED_PRECONDITION,
               absl::StrCat(what, " of group epoch ", group_epoch, " refused: this worker is at ",
                            "group epoch ", group_epoch_,
                            group_epoch < group_epoch_ ? " (the call's epoch is fenced off)"
                                                       : " (not initialised for that epoch)"));
}

void WorkerService::EndGroupWork(const std::string& reason) {
  group_abort_->Abort(reason);
  if (steps_context_ != nullptr) steps_context_->TryCancel();
}

void WorkerService::Fence(const std::string& reason) {
  {
    absl::MutexLock lock(&mu_);
    if (!fenced_.empty()) return;
    fenced_ = reason.empty() ? "fenced" : reason;
    EndGroupWork(absl::StrCat("this worker is fenced off: ", fenced_));
  }
  WEIR_LOG(WARNING) << "rank " << rank_ << " fenced off: " << reason;
  if (hooks_.set_serving) hooks_.set_serving(false);
}

grpc::Status WorkerService::ResetForNewGroup(uint64_t group_epoch) {
  // Init ended the old group's work (EndGroupWork) and waited for its Steps
  // stream and LoadWeights calls to return.
  if (steps_active_ || loads_active_ > 0) {
    return Error(grpc::StatusCode::UNAVAILABLE,
                 absl::StrCat("Init of group epoch ", group_epoch, ": the ",
                              steps_active_ ? "Steps stream" : "LoadWeights call",
                              " of group epoch ", group_epoch_, " is still running"));
  }
  WEIR_LOG(WARNING) << "rank " << rank_ << ": leaving group epoch " << group_epoch_
                    << " for " << group_epoch
                    << ": dropping the model, the KV pool and the communicators";
  if (hooks_.set_serving) hooks_.set_serving(false);
  // Users before what they use (the executor holds KV blocks and the model;
  // the model and the staging plane use the communicators, which use UCX).
  executor_.reset();
  kv_pool_.reset();
  device_decoder_.reset();
  grammar_.reset();
  staging_comm_.reset();
  staged_experts_ = {};
  staged_version_ = 0;
  staging_table_.clear();
  ep_executor_ = nullptr;
  model_runtime_.reset();
  checkpoint_.reset();
  communicator_.reset();
  staging_ucx_.reset();
  ucx_.reset();
  group_abort_ = std::make_unique<parallel::AbortSignal>();  // the new group's
  nccl_unique_id_.clear();
  model_.reset();
  experts_.reset();
  map_broken_ = absl::OkStatus();
  initialized_ = false;
  return grpc::Status::OK;
}

}  // namespace weir::worker
