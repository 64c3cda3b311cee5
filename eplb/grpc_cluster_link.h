// eplb/grpc_cluster_link.h
//
// GrpcClusterLink: ClusterLink over gRPC, to the coordinator's Coordinator
// service and to each worker's Worker service (one channel per address,
// opened on first use and kept).
//
// Thread safety: thread-safe.

#ifndef WEIR_EPLB_GRPC_CLUSTER_LINK_H_
#define WEIR_EPLB_GRPC_CLUSTER_LINK_H_

#include <memory>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "eplb/cluster_link.h"
#include "proto/worker.grpc.pb.h"

namespace weir::eplb {

class GrpcClusterLink final : public ClusterLink {
 public:
  // `coordinator_address` is HOST:PORT of the coordinator's gRPC server.
  explicit GrpcClusterLink(const std::string& coordinator_address);

  // gRPC errors map 1:1 onto absl codes (UNAVAILABLE, DEADLINE_EXCEEDED, ...).
  absl::StatusOr<v1::PlacementInfo> GetPlacement(absl::Time deadline) override;
  absl::StatusOr<v1::PrepareExpertMapResponse> Prepare(const v1::PeerInfo& worker,
                                                       uint64_t epoch, const v1::ExpertMap& map,
                                                       absl::Time deadline) override;
  absl::StatusOr<v1::CommitExpertMapResponse> Commit(uint64_t version, const v1::ExpertMap& map,
                                                     absl::Time deadline) override;

 private:
  v1::Worker::Stub* WorkerStub(const std::string& address);

  std::unique_ptr<v1::Coordinator::Stub> coordinator_;
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::unique_ptr<v1::Worker::Stub>> workers_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace weir::eplb

#endif  // WEIR_EPLB_GRPC_CLUSTER_LINK_H_
