// eplb/fake_cluster_link.h
//
// FakeClusterLink: an in-memory cluster for rebalancer tests. It serves a
// configurable PlacementInfo, records every Prepare and Commit, and its
// Prepare is a barrier: a call returns only once every worker of the
// placement has called Prepare for the same version (or DEADLINE_EXCEEDED
// after `barrier_timeout`), so calling the workers one after another fails.
// A successful Commit becomes the committed map GetPlacement returns, as on
// the coordinator.
//
// Thread safety: thread-safe.

#ifndef WEIR_EPLB_FAKE_CLUSTER_LINK_H_
#define WEIR_EPLB_FAKE_CLUSTER_LINK_H_

#include <cstdint>
#include <map>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "eplb/cluster_link.h"

namespace weir::eplb {

class FakeClusterLink final : public ClusterLink {
 public:
  struct PrepareCall {
    int rank = 0;
    uint64_t epoch = 0;
    v1::ExpertMap map;
  };

  // Serves `world_size` workers (rank r at "worker-r"), epoch `epoch` and an
  // empty committed map of version 0 (a coordinator that never committed).
  FakeClusterLink(int world_size, uint64_t epoch, absl::Duration barrier_timeout);

  // Replaces the committed map GetPlacement returns.
  void SetCommittedMap(const v1::ExpertMap& map);
  // Makes every later GetPlacement fail with `status` (OK restores it).
  void SetPlacementError(absl::Status status);
  // Makes Prepare on `rank` fail with `status` after the barrier.
  void FailPrepare(int rank, absl::Status status);
  // Makes every later Commit fail with `status` (OK restores it).
  void SetCommitError(absl::Status status);

  std::vector<PrepareCall> prepare_calls() const;
  std::vector<v1::CommitExpertMapRequest> commits() const;
  int placement_calls() const;

  absl::StatusOr<v1::PlacementInfo> GetPlacement(absl::Time deadline) override;
  // Reports bytes_staged = 1000 * (rank + 1).
  absl::StatusOr<v1::PrepareExpertMapResponse> Prepare(const v1::PeerInfo& worker,
                                                       uint64_t epoch, const v1::ExpertMap& map,
                                                       absl::Time deadline) override;
  absl::StatusOr<v1::CommitExpertMapResponse> Commit(uint64_t version, const v1::ExpertMap& map,
                                                     absl::Time deadline) override;

 private:
  const absl::Duration barrier_timeout_;
  mutable absl::Mutex mu_;
  v1::PlacementInfo placement_ ABSL_GUARDED_BY(mu_);
  absl::Status placement_error_ ABSL_GUARDED_BY(mu_);
  absl::Status commit_error_ ABSL_GUARDED_BY(mu_);
  std::map<int, absl::Status> prepare_errors_ ABSL_GUARDED_BY(mu_);
  std::vector<PrepareCall> prepare_calls_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::CommitExpertMapRequest> commits_ ABSL_GUARDED_BY(mu_);
  // Prepare calls that arrived, by map version.
  std::map<uint64_t, int> arrived_ ABSL_GUARDED_BY(mu_);
  int placement_calls_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace weir::eplb

#endif  // WEIR_EPLB_FAKE_CLUSTER_LINK_H_
