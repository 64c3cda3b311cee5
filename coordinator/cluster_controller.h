// coordinator/cluster_controller.h
//
// ClusterController drives the registered workers through their lifecycle:
// bring-up (Init with the peer table, then LoadWeights), liveness monitoring
// (periodic health checks; a worker that fails `failure_threshold` checks in a
// row, or whose process exits, is DEAD), expert-map commits, and shutdown.
//
// Thread safety: thread-safe. The monitor runs on its own thread and calls
// `on_change` there whenever a worker's status changes.

#ifndef WEIR_COORDINATOR_CLUSTER_CONTROLLER_H_
#define WEIR_COORDINATOR_CLUSTER_CONTROLLER_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "coordinator/cluster_state.h"
#include "coordinator/worker_client.h"

namespace weir::coordinator {

struct ControllerOptions {
  std::string model_dir;
  uint64_t epoch = 0;
  absl::Duration rpc_timeout = absl::Seconds(10);
  absl::Duration load_timeout = absl::Minutes(10);
  absl::Duration health_interval = absl::Milliseconds(500);
  absl::Duration health_timeout = absl::Seconds(1);
  int failure_threshold = 3;
  // Positions per KV block, sent to every worker at LoadWeights (0: the
  // workers' own default). Each worker sizes its pool in such blocks and
  // reports it; BringUp records the reports in ClusterState (WorkerRecord::kv).
  int32_t kv_block_tokens = 0;
  // Speculative decoding: DSpark drafts a speculative row makes, sent to
  // every worker at LoadWeights (0: off; --speculative, --num_draft_tokens).
  int32_t num_draft_tokens = 0;
  // CED bounded replay of prompts, sent to every worker at LoadWeights
  // (--ced_replay).
  bool ced_replay = false;
  // How many drafts a speculative row verifies, sent to every worker at
  // LoadWeights (--verify_length: "fixed" or "confidence").
  std::string verify_length = "fixed";
  // LoadWeightsRequest.measure_verify_cost (MeasureVerifyCost).
  bool measure_verify_cost = false;
  // LoadWeightsRequest.speculative_max_batch (--speculative_max_batch; 0 = no limit).
  int32_t speculative_max_batch = 0;
  // LoadWeightsRequest.ngram_lookup (--ngram_lookup, resolved; 0 = off).
  int32_t ngram_lookup = 0;
  // LoadWeightsRequest.ngram_lookup_max (--ngram_lookup_max, resolved).
  int32_t ngram_lookup_max = 0;
  // LoadWeightsRequest.ngram_lookup_tokens (--ngram_lookup_tokens; 0 = num_draft_tokens).
  int32_t ngram_lookup_tokens = 0;
};

class ClusterController {
 public:
  // Does not take ownership; `cluster` must outlive the controller.
  ClusterController(ClusterState& cluster, ControllerOptions options);
  ~ClusterController();

  // Sends Init (rank, layout, peer table, EPLB address) and then LoadWeights
  // to every registered worker, marking each LOADING and then READY and
  // recording the KV memory it reports. Every call starts a new group epoch
  // (1, 2, ... within this controller; ClusterState::group_epoch) that Init
  // and LoadWeights carry: a worker of an older epoch refuses the new
  // group's calls, and a worker still holding an older epoch's state (a
  // survivor of a lost peer) drops its model and communicators at the new
  // Init and makes them anew.
  // REQUIRES: every rank registered. Returns the first worker error, with
  // the rank and address added.
  absl::Status BringUp();

  // Returns the ranks whose workers are lost: marked DEAD, or failing
  // `attempts` health checks in a row (health_timeout each, health_interval
  // apart). Registered ranks only.
  std::vector<Rank> LostWorkers(int attempts);

  // Starts the liveness monitor. `on_change` runs on the monitor thread (or
  // on the caller of ReportExit) after any worker status change.
  void StartMonitor(std::function<void()> on_change);
  // Stops and joins the monitor; StartMonitor may start it again (a worker
  // group replacement stops it while the old workers die).
  void StopMonitor();

  // Records that worker process `pid` ended (from the launcher). No-op for
  // pids that are not workers.
  void ReportExit(int64_t pid, const std::string& description);

  // Asks every live worker to shut down (best effort, in parallel).
  void ShutdownWorkers(const std::string& reason);

 private:
  void MonitorLoop();
  void MarkDead(Rank rank, const std::string& detail);
  std::vector<std::shared_ptr<WorkerClient>> Clients();

  ClusterState& cluster_;
  const ControllerOptions options_;
  absl::Mutex mu_;
  // Guarded by mu_: one client per rank, created at BringUp.
  std::vector<std::shared_ptr<WorkerClient>> clients_ ABSL_GUARDED_BY(mu_);
  // The last bring-up's group epoch (0 before the first).
  uint64_t group_epoch_ ABSL_GUARDED_BY(mu_) = 0;
  std::function<void()> on_change_ ABSL_GUARDED_BY(mu_);
  // The monitor runs until StopMonitor; StartMonitor may start it again.
  absl::Mutex monitor_mu_;
  bool monitor_stop_ ABSL_GUARDED_BY(monitor_mu_) = false;
  // Waits up to `wait` for StopMonitor; true once it was called.
  bool MonitorStopped(absl::Duration wait);
  std::thread monitor_;
};

}  // namespace weir::coordinator

#endif  // WEIR_COORDINATOR_CLUSTER_CONTROLLER_H_
