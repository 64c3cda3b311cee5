// coordinator/sample_set.h
//
// SampleSet runs the n samples (SamplingParams.num_samples) of one batch item
// (GenerateBatch, BatchJobs) the way Generate runs a call's: sample i is a
// sequence of its own (a server request id each, seed + i), samples 1.. fork
// sample 0's prefill (SeqRequest::fork_of; not with prompt_logprobs, where
// each sample prefills and reports its own), one GenerationTracker each.
// The item's result holds every sample's Final, in sample order, each with
// its sample_index. One sample failing fails the item (the caller abandons
// the others, as Generate cancels them).
//
// The samples' events come through the caller's SeqEventQueue under
// `base + i` (EventIndex); SplitEventIndex gives the item and the sample back.
//
//   SampleSet& set = items[k].emplace(std::move(built), tokenizer, absl::Now());
//   absl::Status s = set.SubmitRest(next_id, submit_group, queue, EventIndex(k, 0));
//   ...  // for each event: auto [k, i] = SplitEventIndex(event.first);
//   SampleSet::Update u = items[k]->Apply(i, event.second);
//   if (u.done) result = items[k]->Result();
//
// Thread safety: not thread-safe; one thread (the batch's) uses it.

#ifndef WEIR_COORDINATOR_SAMPLE_SET_H_
#define WEIR_COORDINATOR_SAMPLE_SET_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "coordinator/generation_tracker.h"
#include "coordinator/request_builder.h"
#include "coordinator/step_driver.h"
#include "proto/inference.pb.h"

namespace weir::coordinator {

// The samples of one item share a block of event indices this wide; an item
// may have at most this many samples (SubmitRest refuses more).
inline constexpr size_t kSamplesPerItem = size_t{1} << 16;

// The event index of sample `sample` of item `item`.
inline size_t EventIndex(size_t item, uint32_t sample) { return item * kSamplesPerItem + sample; }
// (item, sample) of an event index made by EventIndex.
inline std::pair<size_t, uint32_t> SplitEventIndex(size_t index) {
  return {index / kSamplesPerItem, static_cast<uint32_t>(index % kSamplesPerItem)};
}

class SampleSet {
 public:
  // `built.num_samples` samples (at least one); `tokenizer` (may be null)
  // must outlive the set. `start` is the item's start (TTFT, timings).
  SampleSet(BuiltRequest built, const tokenizer::Tokenizer* tokenizer, absl::Time start);
  SampleSet(const SampleSet&) = delete;  // trackers refer to built_
  SampleSet& operator=(const SampleSet&) = delete;

  uint32_t size() const { return static_cast<uint32_t>(samples_.size()); }
  const BuiltRequest& built() const { return built_; }
  // The server request id of sample `i`. REQUIRES: sample `i` was submitted.
  RequestId id(uint32_t i) const { return *samples_[i].id; }
  // Samples submitted so far (0 or all: SubmitRest submits one group).
  uint32_t submitted() const { return next_submit_; }
  // Every sample has been submitted.
  bool all_submitted() const { return next_submit_ == size(); }
  // Samples submitted and not ended.
  uint32_t running() const;
  // Every sample has ended (Final or error) and nothing is left to submit.
  bool done() const { return all_submitted() && running() == 0; }

  // Submits the samples not submitted yet as one group: sample i as request
  // `next_id()` with seed + i, its events to `queue` under `base + i`,
  // samples 1.. as forks of sample 0 (not with prompt_logprobs), through
  // `submit_group` (StepDriver::SubmitGroup or a stand-in: all or none). One
  // group, so the step loop sees every sample before it plans sample 0's
  // prefill and the others fork it (submitted one by one, sample 0 could be
  // prefilled first and the rest prefill on their own). On an error nothing
  // of this call is submitted and it is returned; the next call tries the
  // same samples again (with fresh ids). INVALID_ARGUMENT (nothing submitted)
  // for more than kSamplesPerItem samples.
  absl::Status SubmitRest(
      const std::function<RequestId()>& next_id,
      const std::function<absl::Status(std::vector<SeqSubmission>)>& submit_group,
      const std::shared_ptr<SeqEventQueue>& queue, size_t base);

  struct Update {
    // The sample's new output; sample_index is set.
    v1::GenerateEvent::Delta delta;
    // A stop string ended sample `sample` before the step loop did: cancel
    // request `id` in the driver.
    bool cancel_in_driver = false;
    RequestId id;
    // The sample failed (GenerationTracker::Update::error): the item fails;
    // stop the others (Abandon).
    absl::Status error;
    // Every sample has ended: Result() is ready.
    bool done = false;
  };
  // Takes sample `sample`'s next event. Events of a sample that has ended
  // (or was never submitted, or is out of range) are ignored.
  Update Apply(uint32_t sample, const SeqEvent& event);

  // Asks to cancel every running sample through `cancel` (with its request
  // id); they stay running until the step loop's answer (a CANCELLED end)
  // comes through Apply, so the item still ends with a result.
  void CancelRunning(const std::function<void(RequestId)>& cancel) const;
  // Cancels every running sample through `cancel` and ends it at once,
  // without a Final: the item failed or is given up; later events of its
  // samples are ignored.
  void Abandon(const std::function<void(RequestId)>& cancel);
  // Ends every running sample at once with `reason` (e.g. DEADLINE), keeping
  // what it generated, after calling `cancel` with its request id. Samples
  // that ended before keep their own reason.
  void EndRunning(v1::FinishReason reason, const std::function<void(RequestId)>& cancel);

  // The item's result: each sample's Final with full output (sample_index
  // set), in sample order, and accepted.{prompt_tokens, server_request_id}
  // ("weir-<sample 0's id>"). REQUIRES: done().
  v1::GenerateResult Result() const;
  // The reason that decides how the item counts: CANCELLED if any sample was
  // cancelled, else DEADLINE if any hit one, else the first sample's.
  // REQUIRES: done().
  v1::FinishReason ItemReason() const;

 private:
  struct Sample {
    std::optional<RequestId> id;
    std::unique_ptr<GenerationTracker> tracker;
    bool running = false;
    std::optional<v1::GenerateEvent::Final> final_message;
  };

  const BuiltRequest built_;
  const tokenizer::Tokenizer* const tokenizer_;
  const absl::Time start_;
  std::vector<Sample> samples_;
  uint32_t next_submit_ = 0;
};

}  // namespace weir::coordinator

#endif  // WEIR_COORDINATOR_SAMPLE_SET_H_
