// eplb/cluster_link.h
//
// ClusterLink: the calls the rebalancer makes to the rest of the cluster (the
// coordinator's placement and commit, every worker's PrepareExpertMap), kept
// behind an interface so the rebalancing loop is tested without gRPC.
// GrpcClusterLink (grpc_cluster_link.h) is the real one, FakeClusterLink
// (fake_cluster_link.h) the one for tests.
//
// Thread safety: implementations must be thread-safe; Prepare is called from
// one thread per worker at the same time.

#ifndef WEIR_EPLB_CLUSTER_LINK_H_
#define WEIR_EPLB_CLUSTER_LINK_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/worker.pb.h"

namespace weir::eplb {

class ClusterLink {
 public:
  virtual ~ClusterLink() = default;

  // Returns the coordinator's worker table, fencing epoch and committed
  // expert map. UNAVAILABLE / DEADLINE_EXCEEDED when the coordinator cannot
  // be reached by `deadline`.
  virtual absl::StatusOr<v1::PlacementInfo> GetPlacement(absl::Time deadline) = 0;

  // Calls PrepareExpertMap(epoch, map) on `worker` (its rank and gRPC
  // address). Blocks until the worker staged the map, failed, or `deadline`
  // passed. Collective on the worker side: the caller must call it for every
  // worker concurrently.
  virtual absl::StatusOr<v1::PrepareExpertMapResponse> Prepare(const v1::PeerInfo& worker,
                                                               uint64_t epoch,
                                                               const v1::ExpertMap& map,
                                                               absl::Time deadline) = 0;

  // Asks the coordinator to commit `map` (as version `version`) at its next
  // step boundary; OK once every rank runs on it. Any error means the map is
  // not known to be committed.
  virtual absl::StatusOr<v1::CommitExpertMapResponse> Commit(uint64_t version,
                                                             const v1::ExpertMap& map,
                                                             absl::Time deadline) = 0;
};

}  // namespace weir::eplb

#endif  // WEIR_EPLB_CLUSTER_LINK_H_
