#include "coordinator/generation_tracker.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace weir::coordinator {
namespace {

v1::FinishReason ToProto(scheduler::FinishReason reason) {
  switch (reason) {
    case scheduler::FinishReason::kEos: return v1::FINISH_REASON_EOS;
    case scheduler::FinishReason::kStopToken: return v1::FINISH_REASON_STOP_TOKEN;
    case scheduler::FinishReason::kMaxTokens: return v1::FINISH_REASON_MAX_TOKENS;
    case scheduler::FinishReason::kContextLimit: return v1::FINISH_REASON_CONTEXT_LIMIT;
    case scheduler::FinishReason::kCancelled: return v1::FINISH_REASON_CANCELLED;
    case scheduler::FinishReason::kWorkerEnded: return v1::FINISH_REASON_GRAMMAR_TERMINATED;
    case scheduler::FinishReason::kNone: break;
  }
  return v1::FINISH_REASON_UNSPECIFIED;
}

}  // namespace

void SeqEventQueue::Push(size_t index, const SeqEvent& event) {
  std::function<void()> listener;
  {
    absl::MutexLock lock(&mu_);
    events_.emplace_back(index, event);
    listener = listener_;
  }
  if (listener) listener();
}

std::optional<std::pair<size_t, SeqEvent>> SeqEventQueue::TryPop() {
  absl::MutexLock lock(&mu_);
  if (events_.empty()) return std::nullopt;
  auto event = std::move(events_.front());
  events_.pop_front();
  return event;
}

void SeqEventQueue::SetListener(std::function<void()> listener) {
  absl::MutexLock lock(&mu_);
  listener_ = std::move(listener);
}

std::optional<std::pair<size_t, SeqEvent>> SeqEventQueue::Pop(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !events_.empty(); };
  if (!mu_.AwaitWithTimeout(absl::Condition(&ready), timeout)) return std::nullopt;
  auto event = std::move(events_.front());
  events_.pop_front();
  return event;
}

SeqSubmission MakeSubmission(RequestId id, const BuiltRequest& built,
                             std::shared_ptr<SeqEventQueue> queue, size_t index) {
  SeqSubmission submission;
  submission.request = scheduler::SeqRequest{.id = id,
                                             .prompt = built.prompt,
                                             .max_new_tokens = built.max_new_tokens,
                                             .min_new_tokens = built.min_new_tokens,
                                             .stop_token_ids = built.stop_token_ids,
                                             .ignore_eos = built.ignore_eos,
                                             .priority = built.priority,
                                             .tenant = built.tenant};
  submission.sampling = built.sampling;
  submission.seed = built.seed;
  submission.constraint = built.constraint;
  submission.no_tokens = built.constraint_admits_only_empty;
  submission.max_queue_time = built.max_queue_time;
  submission.top_logprobs = built.top_logprobs;
  submission.prompt_logprobs = built.prompt_logprobs;
  submission.sink = [queue, index](const SeqEvent& event) { queue->Push(index, event); };
  return submission;
}

GenerationTracker::GenerationTracker(const BuiltRequest& built,
                                     const tokenizer::Tokenizer* tokenizer, absl::Time start)
    : built_(built), start_(start) {
  if (tokenizer != nullptr && built.return_text) {
    decoder_.emplace(*tokenizer, tokenizer::IncrementalDecoderOptions{
                                     .skip_special_tokens = built.skip_special_tokens,
                                     .stop_strings = built.stop_strings,
                                     .include_stop_in_output = built.include_stop_in_output});
  }
  if (tokenizer != nullptr && built.return_text && built.echo_prompt) {
    const std::vector<int32_t> prompt(built.prompt.begin(), built.prompt.end());
    echo_text_ = tokenizer->Decode(prompt, built.skip_special_tokens);
  }
  if (built.prompt_logprobs.has_value() && !built.prompt.empty()) {
    // Nothing precedes the first prompt token: it has no logprob.
    prompt_logprobs_.add_tokens()->set_token_id(built.prompt[0]);
  }
}

bool GenerationTracker::IsHiddenStop(scheduler::FinishReason finish, uint32_t token) const {
  if (built_.include_stop_in_output) return false;
  switch (finish) {
    case scheduler::FinishReason::kEos:
    case scheduler::FinishReason::kStopToken:
      return true;
    case scheduler::FinishReason::kWorkerEnded:
      // The grammar accepted an EOS where it may end (with ignore_eos the
      // scheduler does not call it kEos): still the end marker, not text.
      return std::find(built_.eos_token_ids.begin(), built_.eos_token_ids.end(), token) !=
             built_.eos_token_ids.end();
    default:
      return false;
  }
}

GenerationTracker::Update GenerationTracker::Apply(const SeqEvent& event) {
  Update update;
  if (!event.error.ok()) {
    update.error = ids_.empty() ? event.error
                                : absl::AbortedError(absl::StrCat("failed after ", ids_.size(),
                                                                  " tokens: ",
                                                                  event.error.message()));
    return update;
  }
  for (const v1::TokenLogprobs& entry : event.prompt_logprobs) {
    *prompt_logprobs_.add_tokens() = entry;
  }
  if (!started_ && (!event.tokens.empty() || event.finish != scheduler::FinishReason::kNone)) {
    started_ = true;
    *update.delta.mutable_text() = echo_text_;
    if (built_.prompt_logprobs.has_value()) {
      *update.delta.mutable_prompt_logprobs() = prompt_logprobs_;
    }
  }
  rejected_drafts_ += static_cast<uint32_t>(std::max(event.rejected_drafts, 0));
  bool stop_string = false;
  for (size_t i = 0; i < event.tokens.size(); ++i) {
    const uint32_t token = event.tokens[i];
    if (!first_token_) first_token_ = absl::Now();
    ids_.push_back(token);
    if (static_cast<int32_t>(i) < event.accepted_drafts) ++accepted_drafts_;
    if (built_.return_token_ids) update.delta.add_token_ids(token);
    if (built_.top_logprobs > 0 && i < event.logprobs.size()) {
      logprobs_.push_back(event.logprobs[i]);
      *update.delta.add_logprobs() = event.logprobs[i];
    }
    // The token that ends the sequence as EOS or a stop token is reported
    // (finish reason, ids, usage) but not detokenized, unless the request
    // asks for include_stop_in_output (vLLM's include_stop_str_in_output).
    if (i + 1 == event.tokens.size() && IsHiddenStop(event.finish, token)) continue;
    if (decoder_.has_value()) {
      update.delta.mutable_text()->append(decoder_->Add(static_cast<int32_t>(token)));
      if (decoder_->stopped()) {
        stop_string = true;
        break;
      }
    }
  }
  if (stop_string) {
    reason_ = v1::FINISH_REASON_STOP_SEQUENCE;
    stop_text_ = built_.stop_strings[decoder_->stop_index()];
    update.cancel_in_driver = event.finish == scheduler::FinishReason::kNone;
  } else if (event.finish != scheduler::FinishReason::kNone) {
    reason_ = ToProto(event.finish);
  }
  update.done = reason_ != v1::FINISH_REASON_UNSPECIFIED;
  if (update.done && decoder_.has_value()) update.delta.mutable_text()->append(decoder_->Finish());
  text_ += update.delta.text();
  return update;
}

v1::GenerateEvent::Final GenerationTracker::Final(bool with_full_output) const {
  v1::GenerateEvent::Final out;
  out.set_reason(reason_);
  if (reason_ == v1::FINISH_REASON_STOP_SEQUENCE) {
    out.set_stop_text(stop_text_);
  } else if (reason_ == v1::FINISH_REASON_STOP_TOKEN && !ids_.empty()) {
    out.set_stop_token_id(ids_.back());
  }
  if (with_full_output) {
    out.set_full_text(text_);
    if (built_.return_token_ids) {
      for (uint32_t t : ids_) out.add_full_token_ids(t);
    }
    for (const v1::TokenLogprobs& entry : logprobs_) *out.add_logprobs() = entry;
    if (built_.prompt_logprobs.has_value()) *out.mutable_prompt_logprobs() = prompt_logprobs_;
  }
  out.mutable_usage()->set_prompt_tokens(built_.prompt.size());
  out.mutable_usage()->set_completion_tokens(ids_.size());
  out.mutable_usage()->set_accepted_draft_tokens(accepted_drafts_);
  out.mutable_usage()->set_rejected_draft_tokens(rejected_drafts_);
  out.mutable_timings()->set_total_ms(absl::ToDoubleMilliseconds(absl::Now() - start_));
  if (first_token_) {
    out.mutable_timings()->set_ttft_ms(absl::ToDoubleMilliseconds(*first_token_ - start_));
  }
  return out;
}

}  // namespace weir::coordinator
