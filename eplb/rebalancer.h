// eplb/rebalancer.h
//
// Rebalancer: the EPLB rearrange loop. Given a snapshot of the load window it
// fetches the committed placement from the coordinator, plans a new one with
// the global policy, and, when the predicted gain beats a threshold, prepares
// it on every worker at once and asks the coordinator to commit it. Any
// failure leaves the cluster on its last committed map. Every attempt except
// one skipped for low gain (those are only counted) is kept in a bounded
// history with its predicted and measured ratios, bytes moved and timings.
//
// Thread safety: thread-safe. Attempts run one at a time, on the rebalancer's
// own thread (Submit) or on the caller's (RebalanceOnce).

#ifndef WEIR_EPLB_REBALANCER_H_
#define WEIR_EPLB_REBALANCER_H_

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "eplb/cluster_link.h"
#include "eplb/policy/expert_load.h"
#include "eplb/policy/placement.h"
#include "proto/eplb.pb.h"

namespace weir::eplb {

struct RebalancerOptions {
  // Complete report rounds between two attempts.
  int rearrange_interval = 10;
  // Complete rounds the window must hold before any attempt.
  int min_window_rounds = 2;
  // Smallest predicted relative gain (PredictGain) worth moving weights for.
  double gain_threshold = 0.05;
  absl::Duration placement_timeout = absl::Seconds(10);
  absl::Duration prepare_timeout = absl::Seconds(60);
  absl::Duration commit_timeout = absl::Seconds(60);
  // Threads for the policy (the result does not depend on it).
  int policy_threads = 1;
  // 0: the global policy (every rank may hold any expert; decode). N >= 1:
  // the hierarchical policy over N nodes and `groups` expert groups (every
  // replica of a group stays on its node; multi-node prefill), ranks
  // [n * world / N, (n + 1) * world / N) on node n.
  int nodes = 0;
  int groups = 1;
  // Attempts kept in the history.
  int max_history = 32;
};

// What one attempt plans from, taken from the load window.
struct LoadSnapshot {
  // [num_step_ids, num_layers, num_logical] (LoadWindow::LoadByStep).
  policy::ExpertLoad load;
  // LoadWindow::MeasuredRatio of every map version in the window.
  std::map<uint64_t, double> measured_ratio;
};

enum class AttemptOutcome {
  kCommitted,       // Prepared on every worker and committed.
  kSkippedLowGain,  // The predicted gain was below the threshold; nothing moved.
  kFailed,          // Placement, policy, a prepare or the commit failed; see history.
};

// A copy of what the rebalancer knows, for GetState.
struct RebalancerState {
  // The committed map (as of the last GetPlacement or commit); absent before
  // the first successful GetPlacement.
  std::optional<v1::ExpertMap> committed_map;
  std::optional<policy::Placement> committed_placement;
  uint64_t committed_version = 0;
  uint64_t proposals = 0;
  uint64_t skipped_low_gain = 0;
  // Oldest first, at most max_history.
  std::vector<v1::EplbState::Rebalance> history;
};

class Rebalancer {
 public:
  // Does not take ownership; `link` must outlive the rebalancer.
  // REQUIRES: rearrange_interval >= 1, min_window_rounds >= 1, max_history >= 1.
  Rebalancer(RebalancerOptions options, ClusterLink* link);
  // Drops a snapshot not yet taken, waits for a running attempt (bounded by
  // the timeouts) and joins the thread.
  ~Rebalancer();

  Rebalancer(const Rebalancer&) = delete;
  Rebalancer& operator=(const Rebalancer&) = delete;

  const RebalancerOptions& options() const { return options_; }

  // Returns true when an attempt is due: `complete_rounds` (monotonic, see
  // LoadWindow::complete_rounds) is at least rearrange_interval past the
  // rounds of the last due attempt and the window holds at least
  // min_window_rounds complete rounds. Remembers the rounds when it returns
  // true, so each interval is due once.
  bool Due(uint64_t complete_rounds, int complete_steps_in_window);

  // Hands `snapshot` to the rebalancer's thread and returns at once. A
  // snapshot not yet taken is replaced (the newest load wins).
  void Submit(LoadSnapshot snapshot);

  // Runs one attempt on the calling thread and returns how it ended (the
  // details go to the history and the counters). Blocks for up to the
  // placement, prepare and commit timeouts.
  AttemptOutcome RebalanceOnce(const LoadSnapshot& snapshot);

  // Blocks until no submitted snapshot is waiting or running.
  void WaitIdle();

  RebalancerState State() const;

 private:
  void Loop();
  void Record(v1::EplbState::Rebalance entry) ABSL_LOCKS_EXCLUDED(mu_);

  const RebalancerOptions options_;
  ClusterLink* const link_;

  // Serializes attempts (the thread and direct RebalanceOnce callers).
  absl::Mutex attempt_mu_ ABSL_ACQUIRED_BEFORE(mu_);

  mutable absl::Mutex mu_;
  std::optional<LoadSnapshot> pending_ ABSL_GUARDED_BY(mu_);
  bool running_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t last_due_rounds_ ABSL_GUARDED_BY(mu_) = 0;
  RebalancerState state_ ABSL_GUARDED_BY(mu_);
  std::deque<v1::EplbState::Rebalance> history_ ABSL_GUARDED_BY(mu_);

  std::thread thread_;
};

}  // namespace weir::eplb

#endif  // WEIR_EPLB_REBALANCER_H_
