// coordinator/cluster_state.h
//
// ClusterState is the coordinator's registry of the processes it drives: which
// worker holds which rank, at which address, and whether it is alive and
// ready; plus the EPLB service's address and the cluster's lifecycle.
// Plain C++ (no protobuf): the gRPC services convert at their edge.
//
// Thread safety: thread-safe; every method may be called from any thread.

#ifndef WEIR_COORDINATOR_CLUSTER_STATE_H_
#define WEIR_COORDINATOR_CLUSTER_STATE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "proto/common.pb.h"
#include "absl/time/time.h"
#include "base/strong_id.h"

namespace weir::coordinator {

enum class WorkerStatus { kRegistered, kLoading, kReady, kDead, kStopped };
enum class ClusterLifecycle { kStarting, kReady, kDegraded, kDraining, kStopping };

const char* WorkerStatusName(WorkerStatus status);
const char* LifecycleName(ClusterLifecycle lifecycle);

// The KV memory a worker reported at LoadWeights (zero before).
struct WorkerKvCapacity {
  int32_t block_tokens = 0;
  // Compress ratio of each kv-source layer of the model, in layer order.
  std::vector<int32_t> compress_ratios;
  int64_t num_blocks = 0;
  int32_t num_seq_slots = 0;
  int64_t block_bytes = 0;
  int64_t slot_bytes = 0;
};

struct WorkerRecord {
  Rank rank;
  std::string address;
  std::string hostname;
  int64_t pid = 0;
  WorkerStatus status = WorkerStatus::kRegistered;
  // Why the worker is in its status ("killed by signal 9", "health check
  // failed 3 times: ..."); empty when READY.
  std::string detail;
  // Set by the controller when LoadWeights succeeded.
  WorkerKvCapacity kv;
};

// A rank whose lost worker a recovery waits to see replaced (remote
// workers, --rejoin_timeout_s).
struct RejoinWait {
  Rank rank;
  // When the wait began, and when the recovery gives up.
  absl::Time since;
  absl::Time deadline;
  // The lost worker's address.
  std::string previous_address;
};

class ClusterState {
 public:
  // A cluster that expects exactly `world_size` workers.
  // REQUIRES: world_size >= 1.
  explicit ClusterState(int world_size);

  int world_size() const { return world_size_; }

  // Registers a worker. It gets `requested_rank` if that is in [0, world_size)
  // and free, otherwise the lowest free rank (a rank waiting for a rejoin
  // included: see ExpectRejoin). The same worker registering again (same
  // address, hostname and pid: a retry whose first reply was lost) gets its
  // rank again. Errors: INVALID_ARGUMENT for an empty address or a requested
  // rank outside [-1, world_size); ALREADY_EXISTS if another process holds
  // `address`, UNAVAILABLE (retry) instead when rejoins are enabled (the
  // address's old holder is gone, not yet found lost); when every rank is
  // taken, UNAVAILABLE (retry) if `requested_rank` >= 0 or rejoins are
  // enabled (a restarted remote worker whose old self is not yet found lost,
  // or a spare waiting for a rank to be freed), else RESOURCE_EXHAUSTED.
  absl::StatusOr<Rank> RegisterWorker(const std::string& address, const std::string& hostname,
                                      int64_t pid, int requested_rank);

  // Remote workers with recovery (--expect_workers, --recover_workers): a
  // lost worker's rank is freed for a rejoin, so a worker that finds no free
  // rank (or its address still registered) is told to retry (UNAVAILABLE)
  // instead of being refused for good. Off by default.
  void set_rejoin_enabled(bool enabled);

  // Forgets every worker record (a replacement group registers next).
  void ClearWorkers();
  // Forgets the worker of `rank` (a lost remote worker): the rank is free for
  // the next registration. No-op for a rank that is not registered.
  void ForgetWorker(Rank rank);

  // Records that a recovery waits until `deadline` for a worker to register
  // for `rank`, whose lost worker was at `previous_address` (ForgetWorker
  // freed it). RejoinWaits lists the rank from now until a worker registers
  // for it or ClearRejoinWaits.
  void ExpectRejoin(Rank rank, absl::Time deadline, std::string previous_address);
  // The ranks waiting for a rejoin, by rank.
  std::vector<RejoinWait> RejoinWaits() const;
  // Ends every wait (the recovery registered them all, gave up or stopped).
  void ClearRejoinWaits();

  // Records the EPLB service's address (a later call replaces it).
  void RegisterEplb(const std::string& address);
  std::string eplb_address() const;

  // Waits until every rank is registered or `timeout` passes. Returns true if
  // all registered.
  bool WaitAllRegistered(absl::Duration timeout) const;

  // Sets a worker's status. NOT_FOUND for an unregistered rank. A DEAD worker
  // stays DEAD (returns FAILED_PRECONDITION for any other new status), so a
  // late success report cannot resurrect it. Marking a worker DEAD while the
  // cluster is READY makes the cluster DEGRADED.
  absl::Status SetWorkerStatus(Rank rank, WorkerStatus status, const std::string& detail);

  // Records the KV memory a worker reported at LoadWeights. NOT_FOUND for an
  // unregistered rank.
  absl::Status SetWorkerKv(Rank rank, WorkerKvCapacity kv);

  // Finds the rank of a worker by pid (for child-exit reports). NOT_FOUND if none.
  absl::StatusOr<Rank> RankOfPid(int64_t pid) const;

  // Copies of every registered worker, by rank.
  std::vector<WorkerRecord> Workers() const;

  // True if every rank is registered and READY.
  bool AllReady() const;

  ClusterLifecycle lifecycle() const;
  void set_lifecycle(ClusterLifecycle lifecycle);

  // The expert map committed on every worker (version 0 = the initial map
  // sent at LoadWeights; empty before it is set).
  uint64_t expert_map_version() const;
  v1::ExpertMap expert_map() const;
  void set_expert_map(v1::ExpertMap map);

  // The group epoch of the last bring-up (ClusterController::BringUp); 0
  // before the first.
  uint64_t group_epoch() const;
  void set_group_epoch(uint64_t epoch);

 private:
  const int world_size_;
  mutable absl::Mutex mu_;
  // Guarded by mu_: indexed by rank; address empty = not registered.
  std::vector<WorkerRecord> workers_ ABSL_GUARDED_BY(mu_);
  int registered_ ABSL_GUARDED_BY(mu_) = 0;
  std::string eplb_address_ ABSL_GUARDED_BY(mu_);
  ClusterLifecycle lifecycle_ ABSL_GUARDED_BY(mu_) = ClusterLifecycle::kStarting;
  v1::ExpertMap expert_map_ ABSL_GUARDED_BY(mu_);
  uint64_t group_epoch_ ABSL_GUARDED_BY(mu_) = 0;
  bool rejoin_enabled_ ABSL_GUARDED_BY(mu_) = false;
  // Ranks a recovery waits for, by rank (at most one entry per rank).
  std::vector<RejoinWait> rejoin_waits_ ABSL_GUARDED_BY(mu_);
};

}  // namespace weir::coordinator

#endif  // WEIR_COORDINATOR_CLUSTER_STATE_H_
