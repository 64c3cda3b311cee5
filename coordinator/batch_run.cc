#include "coordinator/batch_run.h"

#include <algorithm>

#include "absl/random/random.h"
#include "absl/time/clock.h"
#include "coordinator/api_error.h"

namespace weir::coordinator {
namespace {

// Cancels a sample's sequence in `driver` (it may have ended there already).
std::function<void(RequestId)> CancelIn(StepDriver& driver) {
  return [&driver](RequestId id) { driver.Cancel(id).IgnoreError(); };
}

}  // namespace

v1::GenerateRequest MergeItem(const v1::GenerateRequest& defaults,
                              const v1::GenerateRequest& item) {
  v1::GenerateRequest merged = defaults;
  switch (item.input_case()) {
    case v1::GenerateRequest::kText: merged.set_text(item.text()); break;
    case v1::GenerateRequest::kTokens: *merged.mutable_tokens() = item.tokens(); break;
    case v1::GenerateRequest::kChat: *merged.mutable_chat() = item.chat(); break;
    default: break;
  }
  if (item.has_sampling()) *merged.mutable_sampling() = item.sampling();
  if (item.has_stop()) *merged.mutable_stop() = item.stop();
  if (item.has_output()) *merged.mutable_output() = item.output();
  if (item.has_constraint()) *merged.mutable_constraint() = item.constraint();
  if (!item.model().empty()) merged.set_model(item.model());
  merged.set_request_id(item.request_id());
  return merged;
}

absl::Status CheckItemTimeout(const v1::GenerateBatchRequest& request) {
  if (!request.has_item_timeout()) return absl::OkStatus();
  const int64_t seconds = request.item_timeout().seconds();
  const int32_t nanos = request.item_timeout().nanos();
  if (nanos <= -1000000000 || nanos >= 1000000000 || (seconds > 0 && nanos < 0) ||
      (seconds < 0 && nanos > 0)) {
    return WithBadField(absl::InvalidArgumentError("item_timeout: not a valid Duration"),
                        "item_timeout", "not a valid Duration");
  }
  if (seconds < 0 || nanos < 0 || (seconds == 0 && nanos == 0)) {
    return WithBadField(absl::InvalidArgumentError("item_timeout: must be positive"),
                        "item_timeout", "must be positive");
  }
  return absl::OkStatus();
}

BatchRun::BatchRun(const v1::GenerateBatchRequest& request, const RequestLimits& limits, Env env,
                   Write write)
    : request_(request), limits_(limits), env_(env), write_(std::move(write)),
      n_(request.items_size()),
      items_(n_) {
  counts_.set_total(n_);
  if (request.has_item_timeout()) {
    item_timeout_ = absl::Seconds(request.item_timeout().seconds()) +
                    absl::Nanoseconds(request.item_timeout().nanos());
  }
}

void BatchRun::Emit(int index, v1::BatchEvent event) {
  ++finished_;
  if (request_.ordering() != v1::BATCH_ORDERING_INPUT_ORDER) {
    write_(std::move(event));
    return;
  }
  items_[index].held = std::move(event);
  while (next_emit_ < n_ && items_[next_emit_].held.has_value()) {
    write_(std::move(*items_[next_emit_].held));
    items_[next_emit_].held.reset();
    ++next_emit_;
  }
}

void BatchRun::ItemError(int index, const absl::Status& status) {
  v1::BatchEvent event;
  v1::BatchEvent::ItemResult* result = event.mutable_item_result();
  result->set_custom_id(request_.items(index).custom_id());
  result->set_index(index);
  ToErrorStatus(status, result->mutable_error());
  if (status.code() == absl::StatusCode::kCancelled) {
    counts_.set_cancelled(counts_.cancelled() + 1);
  } else {
    counts_.set_failed(counts_.failed() + 1);
  }
  Emit(index, std::move(event));
}

void BatchRun::CancelRunning() {
  for (Item& item : items_) {
    if (item.running) item.samples->CancelRunning(CancelIn(env_.driver));
  }
}

void BatchRun::SubmitMore() {
  // An item of n samples takes n of the in-flight sequences; one item always
  // fits an empty window.
  while (!failing_ && next_submit_ < n_ && in_flight_ < kMaxInFlight) {
    const int index = next_submit_;
    Item& item = items_[index];
    const v1::GenerateRequest merged =
        MergeItem(request_.defaults(), request_.items(index).request());
    absl::Status submitted;
    if (!merged.model().empty() && merged.model() != env_.model_name) {
      submitted = absl::NotFoundError("unknown model \"" + merged.model() + "\"");
    } else {
      absl::StatusOr<BuiltRequest> built =
          BuildRequest(merged, limits_, env_.tokenizer,
                       absl::Uniform<uint64_t>(absl::BitGen(), 0, UINT64_MAX));
      submitted = built.status();
      if (submitted.ok()) {
        const int sequences = static_cast<int>(std::max<uint32_t>(built->num_samples, 1));
        if (in_flight_ > 0 && in_flight_ + sequences > kMaxInFlight) return;  // later
        item.samples.emplace(std::move(*built), env_.tokenizer, absl::Now());
        submitted =
            item.samples->SubmitRest([this] { return RequestId(env_.next_request.fetch_add(1)); },
                                     [this](std::vector<SeqSubmission> group) {
                                       return env_.driver.SubmitGroup(std::move(group));
                                     },
                                     queue_, EventIndex(index, 0));
        // Samples already submitted when a later one was refused stop again.
        if (!submitted.ok()) item.samples->Abandon(CancelIn(env_.driver));
      }
    }
    ++next_submit_;
    if (!submitted.ok()) {
      ItemError(index, submitted);
      if (request_.fail_fast()) failing_ = true;
      continue;
    }
    item.running = true;
    in_flight_ += static_cast<int>(item.samples->size());
    if (item_timeout_.has_value()) {
      item.deadline = absl::Now() + *item_timeout_;
      deadlines_.emplace(item.deadline, index);
    }
  }
}

void BatchRun::ExpireItems() {
  const absl::Time now = absl::Now();
  while (!deadlines_.empty() && deadlines_.top().first <= now) {
    const int index = deadlines_.top().second;
    deadlines_.pop();
    Item& item = items_[index];
    if (!item.running) continue;
    item.samples->EndRunning(v1::FINISH_REASON_DEADLINE, CancelIn(env_.driver));
    ItemDone(index);
  }
}

void BatchRun::ItemDone(int index) {
  Item& item = items_[index];
  item.running = false;
  in_flight_ -= static_cast<int>(item.samples->size());
  v1::BatchEvent done;
  v1::BatchEvent::ItemResult* result = done.mutable_item_result();
  result->set_custom_id(request_.items(index).custom_id());
  result->set_index(index);
  switch (item.samples->ItemReason()) {
    case v1::FINISH_REASON_CANCELLED:
      counts_.set_cancelled(counts_.cancelled() + 1);
      break;
    case v1::FINISH_REASON_DEADLINE:
      counts_.set_failed(counts_.failed() + 1);
      break;
    default:
      counts_.set_completed(counts_.completed() + 1);
  }
  *result->mutable_result() = item.samples->Result();
  Emit(index, std::move(done));
}

bool BatchRun::Pump(bool may_submit) {
  if (done_) return true;
  const absl::Time now = absl::Now();
  if (start_ == absl::InfinitePast()) start_ = last_progress_ = now;
  while (finished_ < n_) {
    if (may_submit) SubmitMore();
    if (failing_ && in_flight_ == 0) {
      while (next_submit_ < n_) {
        ItemError(next_submit_++, absl::CancelledError("not run: an earlier item failed"));
      }
      continue;
    }
    auto event = queue_->TryPop();
    if (!event.has_value()) break;
    Apply(event->first, event->second);
  }
  ExpireItems();
  if (finished_ < n_) {
    if (absl::Now() - last_progress_ > absl::Seconds(1)) {
      last_progress_ = absl::Now();
      v1::BatchEvent progress;
      *progress.mutable_progress() = counts_;
      progress.mutable_progress()->set_running(in_flight_);
      progress.mutable_progress()->set_queued(n_ - next_submit_);
      write_(std::move(progress));
    }
    return false;
  }
  v1::BatchEvent summary;
  *summary.mutable_summary()->mutable_counts() = counts_;
  summary.mutable_summary()->set_wall_ms(absl::ToDoubleMilliseconds(absl::Now() - start_));
  write_(std::move(summary));
  done_ = true;
  return true;
}

absl::Time BatchRun::NextWake() const {
  // Progress goes out once more than a second has passed.
  absl::Time wake = last_progress_ + absl::Seconds(1) + absl::Milliseconds(1);
  if (!deadlines_.empty()) wake = std::min(wake, deadlines_.top().first);
  return wake;
}

void BatchRun::Apply(size_t event_index, const SeqEvent& seq_event) {
  const auto [index, sample] = SplitEventIndex(event_index);
  if (index >= static_cast<size_t>(n_)) return;
  Item& item = items_[index];
  if (!item.running) return;  // An event after the item ended.
  SampleSet::Update update = item.samples->Apply(sample, seq_event);
  if (update.cancel_in_driver) env_.driver.Cancel(update.id).IgnoreError();
  if (!update.error.ok()) {
    // One sample failing fails the item: the others stop too.
    item.samples->Abandon(CancelIn(env_.driver));
    item.running = false;
    in_flight_ -= static_cast<int>(item.samples->size());
    ItemError(static_cast<int>(index), update.error);
    if (request_.fail_fast() && !failing_) {
      failing_ = true;
      CancelRunning();
    }
    return;
  }
  if (request_.stream_item_tokens() &&
      (update.delta.token_ids_size() > 0 || !update.delta.text().empty() ||
       update.delta.logprobs_size() > 0 || update.delta.has_prompt_logprobs())) {
    v1::BatchEvent delta;
    delta.mutable_item_delta()->set_custom_id(request_.items(index).custom_id());
    *delta.mutable_item_delta()->mutable_event()->mutable_delta() = std::move(update.delta);
    write_(std::move(delta));
  }
  if (update.done) ItemDone(static_cast<int>(index));
}

}  // namespace weir::coordinator
