#include "coordinator/sample_set.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace weir::coordinator {

SampleSet::SampleSet(BuiltRequest built, const tokenizer::Tokenizer* tokenizer, absl::Time start)
    : built_(std::move(built)), tokenizer_(tokenizer), start_(start) {
  samples_.resize(std::max<uint32_t>(built_.num_samples, 1));
}

uint32_t SampleSet::running() const {
  return static_cast<uint32_t>(
      std::count_if(samples_.begin(), samples_.end(), [](const Sample& s) { return s.running; }));
}

absl::Status SampleSet::SubmitRest(
    const std::function<RequestId()>& next_id,
    const std::function<absl::Status(std::vector<SeqSubmission>)>& submit_group,
    const std::shared_ptr<SeqEventQueue>& queue, size_t base) {
  if (samples_.size() > kSamplesPerItem) {
    return absl::InvalidArgumentError(
        absl::StrCat(samples_.size(), " samples; a batch item takes at most ", kSamplesPerItem));
  }
  if (next_submit_ >= size()) return absl::OkStatus();
  std::vector<SeqSubmission> group;
  for (uint32_t i = next_submit_; i < size(); ++i) {
    Sample& sample = samples_[i];
    sample.id = next_id();
    SeqSubmission submission = MakeSubmission(*sample.id, built_, queue, base + i);
    submission.seed = built_.seed + i;
    if (i > 0 && !built_.prompt_logprobs.has_value()) submission.request.fork_of = samples_[0].id;
    sample.tracker = std::make_unique<GenerationTracker>(built_, tokenizer_, start_);
    group.push_back(std::move(submission));
  }
  if (absl::Status s = submit_group(std::move(group)); !s.ok()) {
    for (uint32_t i = next_submit_; i < size(); ++i) {
      samples_[i].tracker.reset();
      samples_[i].id.reset();
    }
    return s;
  }
  for (uint32_t i = next_submit_; i < size(); ++i) samples_[i].running = true;
  next_submit_ = size();
  return absl::OkStatus();
}

SampleSet::Update SampleSet::Apply(uint32_t index, const SeqEvent& event) {
  Update update;
  if (index >= size() || !samples_[index].running) return update;
  Sample& sample = samples_[index];
  GenerationTracker::Update tracked = sample.tracker->Apply(event);
  update.id = *sample.id;
  update.cancel_in_driver = tracked.cancel_in_driver;
  update.delta = std::move(tracked.delta);
  update.delta.set_sample_index(index);
  if (!tracked.error.ok()) {
    sample.running = false;
    update.error = tracked.error;
    return update;
  }
  if (tracked.done) {
    sample.running = false;
    sample.final_message = sample.tracker->Final(/*with_full_output=*/true);
    sample.final_message->set_sample_index(index);
    update.done = done();
  }
  return update;
}

void SampleSet::CancelRunning(const std::function<void(RequestId)>& cancel) const {
  for (const Sample& sample : samples_) {
    if (sample.running) cancel(*sample.id);
  }
}

void SampleSet::Abandon(const std::function<void(RequestId)>& cancel) {
  for (Sample& sample : samples_) {
    if (!sample.running) continue;
    cancel(*sample.id);
    sample.running = false;
  }
}

void SampleSet::EndRunning(v1::FinishReason reason, const std::function<void(RequestId)>& cancel) {
  for (uint32_t i = 0; i < size(); ++i) {
    Sample& sample = samples_[i];
    if (!sample.running) continue;
    cancel(*sample.id);
    sample.running = false;
    sample.final_message = sample.tracker->Final(/*with_full_output=*/true);
    sample.final_message->set_reason(reason);
    sample.final_message->set_sample_index(i);
  }
}

v1::GenerateResult SampleSet::Result() const {
  v1::GenerateResult result;
  for (const Sample& sample : samples_) {
    if (sample.final_message.has_value()) *result.add_samples() = *sample.final_message;
  }
  result.mutable_accepted()->set_prompt_tokens(static_cast<uint32_t>(built_.prompt.size()));
  if (samples_[0].id.has_value()) {
    result.mutable_accepted()->set_server_request_id(absl::StrCat("weir-", samples_[0].id->value()));
  }
  return result;
}

v1::FinishReason SampleSet::ItemReason() const {
  bool deadline = false;
  for (const Sample& sample : samples_) {
    if (!sample.final_message.has_value()) continue;
    if (sample.final_message->reason() == v1::FINISH_REASON_CANCELLED) {
      return v1::FINISH_REASON_CANCELLED;
    }
    deadline |= sample.final_message->reason() == v1::FINISH_REASON_DEADLINE;
  }
  if (deadline) return v1::FINISH_REASON_DEADLINE;
  return samples_[0].final_message.has_value() ? samples_[0].final_message->reason()
                                               : v1::FINISH_REASON_UNSPECIFIED;
}

}  // namespace weir::coordinator
