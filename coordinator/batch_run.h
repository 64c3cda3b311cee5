// coordinator/batch_run.h
//
// BatchRun executes one GenerateBatch call: items (defaults merged field by
// field) are admitted gradually — at most kMaxInFlight at once, so a huge
// batch never floods the queue, and none while the caller says its client
// is behind, so a slow reader only slows its own admission — and each
// finished item is written as an ItemResult, out of order or in input
// order. A per-item error never ends the stream; fail_fast cancels the
// rest. Progress is sent about once a second and a Summary last. With
// item_timeout, an item still running that long after it was submitted to
// the step loop is cancelled there; its result keeps what it generated,
// with reason DEADLINE (counted as failed in Progress).
//
// BatchRun holds no thread: its owner (the GenerateBatch reactor) calls
// Pump whenever queue() has events (its listener), at NextWake(), and when
// its client caught up.
//
// Thread safety: not thread-safe; the owner serialises every call.

#ifndef WEIR_COORDINATOR_BATCH_RUN_H_
#define WEIR_COORDINATOR_BATCH_RUN_H_

#include <atomic>
#include <functional>
#include <optional>
#include <queue>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"

#include "coordinator/generation_tracker.h"
#include "coordinator/request_builder.h"
#include "coordinator/sample_set.h"
#include "coordinator/step_driver.h"
#include "proto/inference.pb.h"

namespace weir::coordinator {

class BatchRun {
 public:
  static constexpr int kMaxInFlight = 64;

  struct Env {
    StepDriver& driver;
    const tokenizer::Tokenizer* tokenizer;  // may be null
    const std::string& model_name;
    std::atomic<uint64_t>& next_request;    // server request ids
  };

  // Called with each message to send, in order.
  using Write = std::function<void(v1::BatchEvent)>;

  // REQUIRES: `request` passed the structural checks (item count, unique
  // custom ids, CheckItemTimeout). Does not take ownership of anything;
  // `request` must outlive the run.
  BatchRun(const v1::GenerateBatchRequest& request, const RequestLimits& limits, Env env,
           Write write);

  // Where the items' events arrive; set its listener before the first Pump.
  const std::shared_ptr<SeqEventQueue>& queue() const { return queue_; }

  // Submits items (if `may_submit`), applies every queued event, expires
  // items past their deadline and sends Progress when due. Returns true once
  // the Summary has been written (the run is over).
  bool Pump(bool may_submit);

  // When Pump next has work that no event brings: Progress or a deadline.
  absl::Time NextWake() const;

  // Cancels every running item in the driver (the client went away).
  void CancelRunning();

 private:
  struct Item {
    std::optional<SampleSet> samples;
    bool running = false;
    // Submit time + item_timeout (InfiniteFuture without one).
    absl::Time deadline = absl::InfiniteFuture();
    std::optional<v1::BatchEvent> held;  // a result waiting for its turn (INPUT_ORDER)
  };

  void SubmitMore();
  void Emit(int index, v1::BatchEvent event);
  void ItemError(int index, const absl::Status& status);
  // Applies one event (`event_index` made by EventIndex).
  void Apply(size_t event_index, const SeqEvent& event);
  // Ends every running item past its deadline (item_timeout).
  void ExpireItems();
  // Ends running item `index` (every sample ended) with its samples' Finals.
  void ItemDone(int index);

  const v1::GenerateBatchRequest& request_;
  const RequestLimits limits_;
  Env env_;
  Write write_;
  const int n_;
  std::vector<Item> items_;
  std::shared_ptr<SeqEventQueue> queue_ = std::make_shared<SeqEventQueue>();
  v1::BatchEvent::Progress counts_;
  int next_submit_ = 0;
  int next_emit_ = 0;
  int in_flight_ = 0;  // sequences of the running items
  int finished_ = 0;
  bool failing_ = false;
  bool done_ = false;
  absl::Time start_ = absl::InfinitePast();
  absl::Time last_progress_;
  std::optional<absl::Duration> item_timeout_;
  // (deadline, index) of the items submitted with one, earliest on top.
  std::priority_queue<std::pair<absl::Time, int>, std::vector<std::pair<absl::Time, int>>,
                      std::greater<>>
      deadlines_;
};

// INVALID_ARGUMENT (naming item_timeout) unless it is unset or a valid,
// positive Duration.
absl::Status CheckItemTimeout(const v1::GenerateBatchRequest& request);

// Item fields replace the batch defaults field by field (whole sub-messages).
v1::GenerateRequest MergeItem(const v1::GenerateRequest& defaults,
                              const v1::GenerateRequest& item);

}  // namespace weir::coordinator

#endif  // WEIR_COORDINATOR_BATCH_RUN_H_
