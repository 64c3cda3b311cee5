// coordinator/generation_tracker.h
//
// GenerationTracker follows one sequence's events from the step loop and
// turns them into the public API's Delta and Final messages: token ids, text
// through the incremental detokenizer (UTF-8 safe, stop strings across token
// boundaries), finish reason, usage and timings. Generate and GenerateBatch
// share it.
//
// Thread safety: not thread-safe; one tracker per sequence, one thread.

#ifndef WEIR_COORDINATOR_GENERATION_TRACKER_H_
#define WEIR_COORDINATOR_GENERATION_TRACKER_H_

#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <utility>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "coordinator/request_builder.h"
#include "coordinator/step_driver.h"
#include "proto/inference.pb.h"
#include "tokenizer/incremental_decoder.h"

namespace weir::coordinator {

// Events of one or more sequences (by index), filled by the driver thread and
// drained by a gRPC reactor (notified through the listener) or a thread that
// waits in Pop. Held by shared_ptr: the driver may deliver after the reader
// left. Thread-safe.
class SeqEventQueue {
 public:
  // Appends the event, then calls the listener (if any) on the pushing
  // thread (the step loop), so a listener must only note or post work.
  void Push(size_t index, const SeqEvent& event);
  // Waits up to `timeout` for the next event.
  std::optional<std::pair<size_t, SeqEvent>> Pop(absl::Duration timeout);
  // Returns the next event, or nullopt at once if there is none.
  std::optional<std::pair<size_t, SeqEvent>> TryPop();
  // Calls `listener` after every later Push. Set it before the first event
  // can arrive (before submitting); it may be called after the reader left,
  // so it must not capture the reader by raw pointer.
  void SetListener(std::function<void()> listener);

 private:
  absl::Mutex mu_;
  std::deque<std::pair<size_t, SeqEvent>> events_ ABSL_GUARDED_BY(mu_);
  std::function<void()> listener_ ABSL_GUARDED_BY(mu_);
};

// The step-loop submission of `built` as request `id`, whose events go to
// `queue` under `index`.
SeqSubmission MakeSubmission(RequestId id, const BuiltRequest& built,
                             std::shared_ptr<SeqEventQueue> queue, size_t index);

class GenerationTracker {
 public:
  // Does not take ownership; `built` and `tokenizer` (may be null) must
  // outlive the tracker.
  GenerationTracker(const BuiltRequest& built, const tokenizer::Tokenizer* tokenizer,
                    absl::Time start);

  struct Update {
    // New token ids and text (text may be empty mid-character).
    v1::GenerateEvent::Delta delta;
    // The sequence is over: Final() is ready.
    bool done = false;
    // A stop string ended the sequence before the step loop did: the caller
    // must cancel it in the driver.
    bool cancel_in_driver = false;
    // The sequence failed: ABORTED if tokens were already produced (the
    // caller decides what to do with them), else the step loop's error.
    absl::Status error;
  };

  // Takes the sequence's next event. The token that ends it as EOS or a stop
  // token (or an EOS the grammar accepted) counts in ids and usage but adds
  // no text unless the request set include_stop_in_output. With
  // top_logprobs every token's entry goes with it (Delta.logprobs); the
  // first Delta that has a token (or the last, if none comes) carries the
  // prompt logprobs (the first prompt token's entry: logprob 0, no rank)
  // and, with echo_prompt, starts with the prompt's text.
  Update Apply(const SeqEvent& event);

  // The Final message; `with_full_output` adds the full text and ids, and
  // the logprobs asked for (for callers that did not stream).
  v1::GenerateEvent::Final Final(bool with_full_output) const;

  size_t num_tokens() const { return ids_.size(); }

 private:
  // True if `token`, ending the sequence with `finish`, is kept out of the text.
  bool IsHiddenStop(scheduler::FinishReason finish, uint32_t token) const;

  const BuiltRequest& built_;
  std::optional<tokenizer::IncrementalDecoder> decoder_;
  const absl::Time start_;
  std::optional<absl::Time> first_token_;
  std::vector<uint32_t> ids_;
  // Of ids_, the accepted DSpark drafts (Usage.accepted_draft_tokens).
  uint32_t accepted_drafts_ = 0;
  // Drafts rejected by verification (Usage.rejected_draft_tokens).
  uint32_t rejected_drafts_ = 0;
  std::string text_;
  v1::FinishReason reason_ = v1::FINISH_REASON_UNSPECIFIED;
  std::string stop_text_;
  // echo_prompt: the prompt's text, for the first Delta.
  std::string echo_text_;
  // Every token's logprobs (top_logprobs), and the prompt's (prompt_logprobs).
  std::vector<v1::TokenLogprobs> logprobs_;
  v1::PromptLogprobs prompt_logprobs_;
  // The first Delta (echo text, prompt logprobs) has been made.
  bool started_ = false;
};

}  // namespace weir::coordinator

#endif  // WEIR_COORDINATOR_GENERATION_TRACKER_H_
