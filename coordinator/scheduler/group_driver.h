// coordinator/scheduler/group_driver.h
//
// Test-only step loop over in-process FakeWorkers: votes the step type,
// plans every rank, delivers results either before the next plan (plain) or
// one step late (zero-overhead: plan t+1 is built before result t is
// applied), and records the token stream of every request.
//
// Thread safety: not thread-safe.

#ifndef WEIR_COORDINATOR_SCHEDULER_GROUP_DRIVER_H_
#define WEIR_COORDINATOR_SCHEDULER_GROUP_DRIVER_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "coordinator/scheduler/fake_worker.h"
#include "coordinator/scheduler/rank_scheduler.h"
#include "coordinator/scheduler/step_type_policy.h"

namespace weir::coordinator::scheduler {

struct Stream {
  std::vector<uint32_t> tokens;
  FinishReason finish = FinishReason::kNone;
};

class GroupDriver {
 public:
  // Does not take ownership; `ranks` and `workers` [num_ranks] must outlive
  // the driver.
  GroupDriver(std::vector<RankScheduler*> ranks, std::vector<FakeWorker*> workers,
              StepTypePolicy policy, bool zero_overhead);

  // Runs one step of the group. Errors of the schedulers and workers pass
  // through.
  absl::Status Step();
  // Applies the results still undelivered (zero-overhead mode).
  absl::Status Flush();
  // Steps until no rank holds a live sequence, then flushes.
  // DEADLINE_EXCEEDED after `max_steps` steps.
  absl::Status RunToIdle(int64_t max_steps);
  // Records a cancellation done by the caller.
  void RecordCancel(RequestId id) {
    streams_[id].finish = FinishReason::kCancelled;
    ++num_finished_;
  }

  const absl::flat_hash_map<RequestId, Stream>& streams() const { return streams_; }
  int64_t num_steps() const { return static_cast<int64_t>(next_step_); }
  int64_t num_prefill_steps() const { return prefill_steps_; }
  // Requests finished, cancellations included.
  int64_t num_finished() const { return num_finished_; }
  // Updates (tokens or finishes) applied by the last Step or Flush.
  int64_t last_updates() const { return last_updates_; }

 private:
  absl::Status Apply(std::vector<RankStepResult>& results);

  std::vector<RankScheduler*> ranks_;
  std::vector<FakeWorker*> workers_;
  StepTypePolicy policy_;
  bool zero_overhead_;
  uint64_t next_step_ = 0;
  int64_t prefill_steps_ = 0;
  int64_t last_updates_ = 0;
  int64_t num_finished_ = 0;
  std::optional<std::vector<RankStepResult>> undelivered_;
  absl::flat_hash_map<RequestId, Stream> streams_;
};

}  // namespace weir::coordinator::scheduler

#endif  // WEIR_COORDINATOR_SCHEDULER_GROUP_DRIVER_H_
