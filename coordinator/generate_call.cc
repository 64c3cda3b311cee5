#include "coordinator/generate_call.h"

#include "absl/container/flat_hash_set.h"
#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "coordinator/api_error.h"
#include "coordinator/inference_service.h"

namespace weir::coordinator {
namespace {

grpc::Status NotReady() {
  return ToApiStatus(
      WithReason(absl::UnavailableError("the server is not ready"), kReasonNotReady));
}

}  // namespace

grpc::ServerWriteReactor<v1::GenerateEvent>* GenerateCall::Start(
    InferenceService& service, const v1::GenerateRequest* request) {
  std::shared_ptr<GenerateCall> call(new GenerateCall(service, request));
  call->weak_self_ = call;
  call->Adopt(call);
  // Tokenizing and compiling a constraint may take a while: not on gRPC's threads.
  service.executor().Post([call] { call->Admit(); });
  return call.get();
}

void GenerateCall::Kick() {
  if (drain_posted_.exchange(true)) return;
  std::shared_ptr<GenerateCall> self = weak_self_.lock();
  if (self == nullptr) return;
  service_.executor().Post([self] { self->Drain(); });
}

void GenerateCall::Admit() {
  {
    absl::MutexLock lock(&mu_);
    if (finishing()) return;  // Cancelled before admission.
    StepDriver* driver = service_.driver();
    if (driver == nullptr) {
      End(NotReady());
    } else if (grpc::Status s = service_.CheckModel(request_.model()); !s.ok()) {
      End(s);
    } else {
      const absl::Time start = absl::Now();
      RequestLimits limits = service_.CurrentLimits();
      limits.grammar = service_.grammar_.get();
      const uint64_t first_id = service_.next_request_.fetch_add(1);
      absl::StatusOr<BuiltRequest> built =
          BuildRequest(request_, limits, service_.tokenizer_.get(),
                       absl::Uniform<uint64_t>(absl::BitGen(), 0, UINT64_MAX) ^ first_id);
      if (!built.ok()) {
        End(ToApiStatus(built.status()));
      } else {
        // Sample i is a sequence of its own (ids first_id..; seed + i).
        const size_t n = built->num_samples;
        ids_ = {RequestId(first_id)};
        for (size_t i = 1; i < n; ++i) {
          ids_.push_back(RequestId(service_.next_request_.fetch_add(1)));
        }
        const std::string& client_id = request_.request_id();
        bool duplicate = false;
        if (!client_id.empty()) {
          absl::MutexLock lock(&service_.mu_);
          duplicate = !service_.in_flight_.emplace(client_id, ids_).second;
          if (!duplicate) client_id_ = client_id;
        }
        if (duplicate) {
          End(grpc::Status(grpc::StatusCode::ALREADY_EXISTS,
                           "request_id \"" + client_id + "\" is already in flight"));
        } else {
          driver_ = driver;
          stream_tokens_ = built->stream_tokens;
          running_.assign(n, false);
          samples_.assign(n, *built);
          queue_ = std::make_shared<SeqEventQueue>();
          std::weak_ptr<GenerateCall> weak = weak_self_;
          queue_->SetListener([weak] {
            if (std::shared_ptr<GenerateCall> call = weak.lock()) call->Kick();
          });
          std::vector<SeqSubmission> group;
          for (size_t i = 0; i < n; ++i) {
            samples_[i].seed = built->seed + i;
            SeqSubmission submission = MakeSubmission(ids_[i], samples_[i], queue_, i);
            // The other samples fork the first one's prefill (not with prompt
            // logprobs: each sample reports them, from a prefill of its own);
            // submitted together, so the loop plans them in one step.
            if (i > 0 && !built->prompt_logprobs.has_value()) submission.request.fork_of = ids_[0];
            group.push_back(std::move(submission));
          }
          const absl::Status submitted = driver->SubmitGroup(std::move(group));
          if (submitted.ok()) running_.assign(n, true);
          if (!submitted.ok()) {
            CancelRunning();
            End(ToApiStatus(submitted));
          } else {
            v1::GenerateEvent accepted;
            accepted.mutable_accepted()->set_server_request_id(absl::StrCat("weir-", first_id));
            accepted.mutable_accepted()->set_model_revision(service_.model_.revision);
            accepted.mutable_accepted()->set_prompt_tokens(built->prompt.size());
            QueueWrite(std::move(accepted));
            for (size_t i = 0; i < n; ++i) {
              trackers_.push_back(std::make_unique<GenerationTracker>(
                  samples_[i], service_.tokenizer_.get(), start));
            }
            left_ = n;
          }
        }
      }
    }
  }
  Flush();
  // Events that arrived while admitting (the listener's drain waited on mu_
  // and may have run before the trackers existed) are taken now.
  Kick();
}

void GenerateCall::Drain() {
  drain_posted_.store(false);
  {
    absl::MutexLock lock(&mu_);
    while (!finishing() && left_ > 0 && queue_ != nullptr) {
      auto event = queue_->TryPop();
      if (!event.has_value()) break;
      const size_t i = event->first;
      if (i >= running_.size() || !running_[i]) continue;  // After the sample ended.
      GenerationTracker::Update update = trackers_[i]->Apply(event->second);
      if (!update.error.ok()) {
        // One sample failing fails the call: the others stop too.
        running_[i] = false;
        CancelRunning();
        End(ToApiStatus(update.error));
        break;
      }
      if (update.cancel_in_driver) driver_->Cancel(ids_[i]).IgnoreError();
      if (stream_tokens_ &&
          (update.delta.token_ids_size() > 0 || !update.delta.text().empty() ||
           update.delta.logprobs_size() > 0 || update.delta.has_prompt_logprobs())) {
        v1::GenerateEvent delta;
        *delta.mutable_delta() = std::move(update.delta);
        delta.mutable_delta()->set_sample_index(static_cast<uint32_t>(i));
        QueueWrite(std::move(delta));
      }
      if (!update.done) continue;
      running_[i] = false;
      --left_;
      v1::GenerateEvent final_event;
      *final_event.mutable_final() = trackers_[i]->Final(/*with_full_output=*/!stream_tokens_);
      final_event.mutable_final()->set_sample_index(static_cast<uint32_t>(i));
      QueueWrite(std::move(final_event));
      if (left_ == 0) End(grpc::Status::OK);
    }
    if (!finishing() && backlog() > kMaxBacklog) {
      CancelRunning();
      DropQueued();
      End(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                       absl::StrCat("the client reads too slowly: ", kMaxBacklog,
                                    " messages were waiting to be sent")));
    }
  }
  Flush();
}

void GenerateCall::CancelRunning() {
  for (size_t i = 0; i < running_.size(); ++i) {
    if (running_[i]) driver_->Cancel(ids_[i]).IgnoreError();
  }
}

void GenerateCall::ReleaseClientId() {
  if (client_id_.empty()) return;
  absl::MutexLock lock(&service_.mu_);
  service_.in_flight_.erase(client_id_);
  client_id_.clear();
}

void GenerateCall::End(grpc::Status status) {
  // The id is free again as soon as the outcome is decided (a client that
  // saw the status may reuse it at once).
  ReleaseClientId();
  QueueFinish(std::move(status));
}

void GenerateCall::OnCancel() {
  {
    absl::MutexLock lock(&mu_);
    if (!finishing()) {
      CancelRunning();
      End(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled by the client"));
    }
  }
  Flush();
}

void GenerateCall::OnWriteFailed() {
  if (finishing()) return;
  CancelRunning();
  End(grpc::Status(grpc::StatusCode::CANCELLED, "the client went away"));
}

void GenerateCall::OnCallDone() {
  absl::MutexLock lock(&mu_);
  ReleaseClientId();
}

// GenerateBatchCall.

grpc::ServerWriteReactor<v1::BatchEvent>* GenerateBatchCall::Start(
    InferenceService& service, const v1::GenerateBatchRequest* request) {
  std::shared_ptr<GenerateBatchCall> call(new GenerateBatchCall(service, request));
  call->weak_self_ = call;
  call->Adopt(call);
  service.executor().Post([call] { call->Admit(); });
  return call.get();
}

void GenerateBatchCall::Kick() {
  if (drain_posted_.exchange(true)) return;
  std::shared_ptr<GenerateBatchCall> self = weak_self_.lock();
  if (self == nullptr) return;
  service_.executor().Post([self] { self->Drain(); });
}

void GenerateBatchCall::Admit() {
  {
    absl::MutexLock lock(&mu_);
    if (finishing()) return;
    StepDriver* driver = service_.driver();
    const int n = request_.items_size();
    const uint32_t max_items = service_.limits_.max_batch_items;
    absl::flat_hash_set<std::string> ids;
    grpc::Status invalid;
    if (driver == nullptr) {
      invalid = NotReady();
    } else if (n == 0) {
      invalid = grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "GenerateBatch: no items");
    } else if (static_cast<uint32_t>(n) > max_items) {
      invalid = grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                             absl::StrCat("GenerateBatch: ", n, " items; at most ", max_items));
    }
    for (int i = 0; invalid.ok() && i < n; ++i) {
      const v1::BatchItem& item = request_.items(i);
      if (item.custom_id().empty() || item.custom_id().size() > 64) {
        invalid = grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                               "GenerateBatch: custom_id must be 1..64 bytes");
      } else if (!ids.insert(item.custom_id()).second) {
        invalid = grpc::Status(
            grpc::StatusCode::INVALID_ARGUMENT,
            "GenerateBatch: duplicate custom_id \"" + item.custom_id() + "\"");
      }
    }
    if (absl::Status s = CheckItemTimeout(request_); invalid.ok() && !s.ok()) {
      invalid = ToApiStatus(s);
    }
    if (!invalid.ok()) {
      QueueFinish(std::move(invalid));
    } else {
      RequestLimits limits = service_.CurrentLimits();
      limits.grammar = service_.grammar_.get();
      run_.emplace(request_, limits,
                   BatchRun::Env{.driver = *driver,
                                 .tokenizer = service_.tokenizer_.get(),
                                 .model_name = service_.model_.name,
                                 .next_request = service_.next_request_},
                   // Called only from Pump, under mu_.
                   [this](v1::BatchEvent event) ABSL_NO_THREAD_SAFETY_ANALYSIS {
                     QueueWrite(std::move(event));
                   });
      std::weak_ptr<GenerateBatchCall> weak = weak_self_;
      run_->queue()->SetListener([weak] {
        if (std::shared_ptr<GenerateBatchCall> call = weak.lock()) call->Kick();
      });
    }
  }
  Flush();
  Kick();
}

void GenerateBatchCall::Drain() {
  drain_posted_.store(false);
  {
    absl::MutexLock lock(&mu_);
    if (finishing() || !run_.has_value()) return;
    held_back_ = backlog() >= kMaxBacklog;
    if (run_->Pump(/*may_submit=*/!held_back_)) {
      QueueFinish(grpc::Status::OK);
    } else if (const absl::Time wake = run_->NextWake(); wake < timer_at_) {
      // Progress and item deadlines come due without an event.
      timer_at_ = wake;
      std::weak_ptr<GenerateBatchCall> weak = weak_self_;
      service_.executor().PostAt(wake, [weak, wake] {
        std::shared_ptr<GenerateBatchCall> call = weak.lock();
        if (call == nullptr) return;
        {
          absl::MutexLock lock(&call->mu_);
          if (call->timer_at_ == wake) call->timer_at_ = absl::InfiniteFuture();
        }
        call->Kick();
      });
    }
  }
  Flush();
}

void GenerateBatchCall::OnWritten() {
  if (held_back_ && backlog() < kMaxBacklog / 2) {
    held_back_ = false;
    Kick();
  }
}

void GenerateBatchCall::OnCancel() {
  {
    absl::MutexLock lock(&mu_);
    if (!finishing()) {
      if (run_.has_value()) run_->CancelRunning();
      QueueFinish(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled by the client"));
    }
  }
  Flush();
}

void GenerateBatchCall::OnWriteFailed() {
  if (finishing()) return;
  if (run_.has_value()) run_->CancelRunning();
  QueueFinish(grpc::Status(grpc::StatusCode::CANCELLED, "the client went away"));
}

}  // namespace weir::coordinator
