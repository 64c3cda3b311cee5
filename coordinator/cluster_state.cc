#include "coordinator/cluster_state.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/logging.h"

namespace weir::coordinator {

const char* WorkerStatusName(WorkerStatus status) {
  switch (status) {
    case WorkerStatus::kRegistered: return "REGISTERED";
    case WorkerStatus::kLoading: return "LOADING";
    case WorkerStatus::kReady: return "READY";
    case WorkerStatus::kDead: return "DEAD";
    case WorkerStatus::kStopped: return "STOPPED";
  }
  return "?";
}

const char* LifecycleName(ClusterLifecycle lifecycle) {
  switch (lifecycle) {
    case ClusterLifecycle::kStarting: return "STARTING";
    case ClusterLifecycle::kReady: return "READY";
    case ClusterLifecycle::kDegraded: return "DEGRADED";
    case ClusterLifecycle::kDraining: return "DRAINING";
    case ClusterLifecycle::kStopping: return "STOPPING";
  }
  return "?";
}

ClusterState::ClusterState(int world_size) : world_size_(world_size), workers_(world_size) {
  WEIR_CHECK_GE(world_size, 1);
}

absl::StatusOr<Rank> ClusterState::RegisterWorker(const std::string& address,
                                                  const std::string& hostname, int64_t pid,
                                                  int requested_rank) {
  if (address.empty()) return absl::InvalidArgumentError("Register: empty address");
  if (requested_rank < -1 || requested_rank >= world_size_) {
    return absl::InvalidArgumentError(absl::StrCat("Register: requested rank ", requested_rank,
                                                   " outside [-1, ", world_size_, ")"));
  }
  absl::MutexLock lock(&mu_);
  for (const WorkerRecord& w : workers_) {
    if (w.address != address) continue;
    if (w.pid == pid && w.hostname == hostname &&
        (requested_rank < 0 || requested_rank == w.rank.value())) {
      return w.rank;  // a retry of a registration whose reply was lost
    }
    if (rejoin_enabled_) {
      return absl::UnavailableError(absl::StrCat(
          "Register: ", address, " still holds rank ", w.rank.value(), " (pid ", w.pid,
          "); retry: the rank is freed when that worker is found lost"));
    }
    return absl::AlreadyExistsError(
        absl::StrCat("Register: ", address, " already holds rank ", w.rank.value()));
  }
  int rank = -1;
  if (requested_rank >= 0 && workers_[requested_rank].address.empty()) {
    rank = requested_rank;
  } else {
    for (int r = 0; r < world_size_; ++r) {
      if (workers_[r].address.empty()) {
        rank = r;
        break;
      }
    }
  }
  if (rank < 0 && requested_rank >= 0) {
    // A restarted worker asking for its rank before the coordinator found
    // the old one lost (a remote rejoin): the registration client retries
    // UNAVAILABLE, and the recovery frees the rank.
    return absl::UnavailableError(absl::StrCat(
        "Register: rank ", requested_rank, " is held by the worker at ",
        workers_[requested_rank].address, " and no rank is free; retry (a rank is freed when "
        "its worker is found lost)"));
  }
  if (rank < 0 && rejoin_enabled_) {
    // A restarted worker that asked for any rank (or a spare): the same.
    return absl::UnavailableError(absl::StrCat(
        "Register: all ", world_size_, " ranks are held; retry (a rank is freed when its "
        "worker is found lost)"));
  }
  if (rank < 0) {
    return absl::ResourceExhaustedError(
        absl::StrCat("Register: all ", world_size_, " ranks are taken"));
  }
  workers_[rank] = WorkerRecord{.rank = Rank(rank), .address = address, .hostname = hostname,
                                .pid = pid, .status = WorkerStatus::kRegistered};
  ++registered_;
  std::erase_if(rejoin_waits_, [rank](const RejoinWait& w) { return w.rank.value() == rank; });
  return Rank(rank);
}

void ClusterState::set_rejoin_enabled(bool enabled) {
  absl::MutexLock lock(&mu_);
  rejoin_enabled_ = enabled;
}

void ClusterState::ExpectRejoin(Rank rank, absl::Time deadline, std::string previous_address) {
  absl::MutexLock lock(&mu_);
  if (rank.value() < 0 || rank.value() >= world_size_ ||
      !workers_[rank.value()].address.empty()) {
    return;  // not a free rank
  }
  std::erase_if(rejoin_waits_, [rank](const RejoinWait& w) { return w.rank == rank; });
  rejoin_waits_.push_back(RejoinWait{.rank = rank,
                                     .since = absl::Now(),
                                     .deadline = deadline,
                                     .previous_address = std::move(previous_address)});
  std::sort(rejoin_waits_.begin(), rejoin_waits_.end(),
            [](const RejoinWait& a, const RejoinWait& b) { return a.rank < b.rank; });
}

std::vector<RejoinWait> ClusterState::RejoinWaits() const {
  absl::MutexLock lock(&mu_);
  return rejoin_waits_;
}

void ClusterState::ClearRejoinWaits() {
  absl::MutexLock lock(&mu_);
  rejoin_waits_.clear();
}

void ClusterState::ClearWorkers() {
  absl::MutexLock lock(&mu_);
  for (WorkerRecord& w : workers_) w = WorkerRecord{};
  registered_ = 0;
  rejoin_waits_.clear();
}

void ClusterState::ForgetWorker(Rank rank) {
  absl::MutexLock lock(&mu_);
  if (rank.value() < 0 || rank.value() >= world_size_ ||
      workers_[rank.value()].address.empty()) {
    return;
  }
  workers_[rank.value()] = WorkerRecord{};
  --registered_;
}

uint64_t ClusterState::group_epoch() const {
  absl::MutexLock lock(&mu_);
  return group_epoch_;
}

void ClusterState::set_group_epoch(uint64_t epoch) {
  absl::MutexLock lock(&mu_);
  group_epoch_ = epoch;
}

void ClusterState::RegisterEplb(const std::string& address) {
  absl::MutexLock lock(&mu_);
  eplb_address_ = address;
}

std::string ClusterState::eplb_address() const {
  absl::MutexLock lock(&mu_);
  return eplb_address_;
}

bool ClusterState::WaitAllRegistered(absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  auto all = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return registered_ == world_size_; };
  return mu_.AwaitWithTimeout(absl::Condition(&all), timeout);
}

absl::Status ClusterState::SetWorkerStatus(Rank rank, WorkerStatus status,
                                           const std::string& detail) {
  absl::MutexLock lock(&mu_);
  if (rank.value() < 0 || rank.value() >= world_size_ ||
      workers_[rank.value()].address.empty()) {
    return absl::NotFoundError(absl::StrCat("no worker with rank ", rank.value()));
  }
  WorkerRecord& w = workers_[rank.value()];
  if (w.status == WorkerStatus::kDead && status != WorkerStatus::kDead) {
    return absl::FailedPreconditionError(
        absl::StrCat("worker ", rank.value(), " is dead: ", w.detail));
  }
  if (w.status == WorkerStatus::kDead) return absl::OkStatus();  // Keep the first cause.
  w.status = status;
  w.detail = detail;
  if (status == WorkerStatus::kDead && (lifecycle_ == ClusterLifecycle::kReady ||
                                        lifecycle_ == ClusterLifecycle::kStarting)) {
    lifecycle_ = ClusterLifecycle::kDegraded;
  }
  return absl::OkStatus();
}

absl::Status ClusterState::SetWorkerKv(Rank rank, WorkerKvCapacity kv) {
  absl::MutexLock lock(&mu_);
  if (rank.value() < 0 || rank.value() >= world_size_ ||
      workers_[rank.value()].address.empty()) {
    return absl::NotFoundError(absl::StrCat("no worker with rank ", rank.value()));
  }
  workers_[rank.value()].kv = std::move(kv);
  return absl::OkStatus();
}

absl::StatusOr<Rank> ClusterState::RankOfPid(int64_t pid) const {
  absl::MutexLock lock(&mu_);
  for (const WorkerRecord& w : workers_) {
    if (!w.address.empty() && w.pid == pid) return w.rank;
  }
  return absl::NotFoundError(absl::StrCat("no worker with pid ", pid));
}

std::vector<WorkerRecord> ClusterState::Workers() const {
  absl::MutexLock lock(&mu_);
  std::vector<WorkerRecord> out;
  for (const WorkerRecord& w : workers_) {
    if (!w.address.empty()) out.push_back(w);
  }
  return out;
}

bool ClusterState::AllReady() const {
  absl::MutexLock lock(&mu_);
  for (const WorkerRecord& w : workers_) {
    if (w.address.empty() || w.status != WorkerStatus::kReady) return false;
  }
  return true;
}

ClusterLifecycle ClusterState::lifecycle() const {
  absl::MutexLock lock(&mu_);
  return lifecycle_;
}

void ClusterState::set_lifecycle(ClusterLifecycle lifecycle) {
  absl::MutexLock lock(&mu_);
  lifecycle_ = lifecycle;
}

uint64_t ClusterState::expert_map_version() const {
  absl::MutexLock lock(&mu_);
  return expert_map_.version();
}

v1::ExpertMap ClusterState::expert_map() const {
  absl::MutexLock lock(&mu_);
  return expert_map_;
}

void ClusterState::set_expert_map(v1::ExpertMap map) {
  absl::MutexLock lock(&mu_);
  expert_map_ = std::move(map);
}

}  // namespace weir::coordinator
