#include "eplb/fake_cluster_link.h"

#include "absl/strings/str_cat.h"

namespace weir::eplb {

FakeClusterLink::FakeClusterLink(int world_size, uint64_t epoch, absl::Duration barrier_timeout)
    : barrier_timeout_(barrier_timeout) {
  placement_.set_coordinator_epoch(epoch);
  for (int r = 0; r < world_size; ++r) {
    v1::PeerInfo* worker = placement_.add_workers();
    worker->set_rank(r);
    worker->set_address(absl::StrCat("worker-", r));
  }
}

void FakeClusterLink::SetCommittedMap(const v1::ExpertMap& map) {
  absl::MutexLock lock(&mu_);
  *placement_.mutable_committed_map() = map;
}

void FakeClusterLink::SetPlacementError(absl::Status status) {
  absl::MutexLock lock(&mu_);
  placement_error_ = std::move(status);
}

void FakeClusterLink::FailPrepare(int rank, absl::Status status) {
  absl::MutexLock lock(&mu_);
  prepare_errors_[rank] = std::move(status);
}

void FakeClusterLink::SetCommitError(absl::Status status) {
  absl::MutexLock lock(&mu_);
  commit_error_ = std::move(status);
}

std::vector<FakeClusterLink::PrepareCall> FakeClusterLink::prepare_calls() const {
  absl::MutexLock lock(&mu_);
  return prepare_calls_;
}

std::vector<v1::CommitExpertMapRequest> FakeClusterLink::commits() const {
  absl::MutexLock lock(&mu_);
  return commits_;
}

int FakeClusterLink::placement_calls() const {
  absl::MutexLock lock(&mu_);
  return placement_calls_;
}

absl::StatusOr<v1::PlacementInfo> FakeClusterLink::GetPlacement(absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  ++placement_calls_;
  if (!placement_error_.ok()) return placement_error_;
  return placement_;
}

absl::StatusOr<v1::PrepareExpertMapResponse> FakeClusterLink::Prepare(const v1::PeerInfo& worker,
                                                                      uint64_t epoch,
                                                                      const v1::ExpertMap& map,
                                                                      absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  prepare_calls_.push_back({.rank = worker.rank(), .epoch = epoch, .map = map});
  const uint64_t version = map.version();
  ++arrived_[version];
  const int world = placement_.workers_size();
  auto all_arrived = [this, version, world]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return arrived_[version] >= world;
  };
  if (!mu_.AwaitWithTimeout(absl::Condition(&all_arrived), barrier_timeout_)) {
    return absl::DeadlineExceededError(absl::StrCat("rank ", worker.rank(), ": only ",
                                                    arrived_[version], " of ", world,
                                                    " ranks called Prepare for version ",
                                                    version));
  }
  if (auto it = prepare_errors_.find(worker.rank()); it != prepare_errors_.end()) {
    return it->second;
  }
  v1::PrepareExpertMapResponse response;
  response.set_prepared_version(version);
  response.set_bytes_staged(1000 * static_cast<uint64_t>(worker.rank() + 1));
  return response;
}

absl::StatusOr<v1::CommitExpertMapResponse> FakeClusterLink::Commit(uint64_t version,
                                                                    const v1::ExpertMap& map,
                                                                    absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  v1::CommitExpertMapRequest request;
  request.set_version(version);
  *request.mutable_map() = map;
  commits_.push_back(request);
  if (!commit_error_.ok()) return commit_error_;
  *placement_.mutable_committed_map() = map;
  v1::CommitExpertMapResponse response;
  response.set_committed_version(version);
  return response;
}

}  // namespace weir::eplb
