// coordinator/batch_run.h
//
// BatchRun executes one GenerateBatch call: items (defaults merged field by
// field) are admitted gradually — at most kMaxInFlight sequences at once (an
// item of n samples is n sequences), so a huge batch never floods the queue
// and a slow reader only slows its own admission — and each finished item is
// written as an ItemResult, out of order or in input order. An item with
// num_samples n runs as Generate runs a call (SampleSet: seed + i, samples
// 1.. fork sample 0's prefill); its result holds n Finals by sample_index,
// its streamed deltas carry the sample_index, and one failing sample fails
// the item. A per-item error never ends the stream;
// fail_fast cancels the rest. Progress is sent about once a second and a
// Summary last. With item_timeout, an item still running that long after it
// was submitted to the step loop is cancelled there; its result keeps what
// it generated, with reason DEADLINE (counted as failed in Progress; with
// several samples, those still running get DEADLINE).
//
// Thread safety: one BatchRun per call, on the gRPC handler thread.

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
#include "proto/inference.grpc.pb.h"

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

  // REQUIRES: `request` passed the structural checks (item count, unique
  // custom ids, CheckItemTimeout). Does not take ownership of anything.
  BatchRun(const v1::GenerateBatchRequest& request, const RequestLimits& limits, Env env,
           grpc::ServerWriter<v1::BatchEvent>& writer);

  // Runs to the Summary. CANCELLED if the client goes away (in-flight items
  // are cancelled in the driver).
  grpc::Status Run(grpc::ServerContext& context);

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
  void CancelRunning();
  // Ends every running item past its deadline (item_timeout).
  void ExpireItems();
  // Ends running item `index` (every sample ended) with its samples' Finals.
  void ItemDone(int index);

  const v1::GenerateBatchRequest& request_;
  const RequestLimits limits_;
  Env env_;
  grpc::ServerWriter<v1::BatchEvent>& writer_;
  const int n_;
  std::vector<Item> items_;
  std::shared_ptr<SeqEventQueue> queue_ = std::make_shared<SeqEventQueue>();
  v1::BatchEvent::Progress counts_;
  int next_submit_ = 0;
  int next_emit_ = 0;
  int in_flight_ = 0;  // sequences of the running items
  int finished_ = 0;
  bool failing_ = false;
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
