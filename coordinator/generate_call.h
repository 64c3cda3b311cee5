// coordinator/generate_call.h
//
// The public API's streaming calls as gRPC callback reactors: GenerateCall
// serves one Generate call, GenerateBatchCall one GenerateBatch call. Neither
// holds a thread while it waits for tokens: admission runs as a task on the
// service's CallExecutor, the step loop's events reach the call through its
// SeqEventQueue listener, which posts one drain task at a time, and writes go
// out one at a time (QueuedWriteReactor). A client that cancels, or whose
// stream breaks, has its sequences cancelled in the step loop.
//
// Thread safety: each call guards its state with its own mutex; its tasks,
// gRPC's reactions and the listener may run on any thread.

#ifndef WEIR_COORDINATOR_GENERATE_CALL_H_
#define WEIR_COORDINATOR_GENERATE_CALL_H_

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "coordinator/batch_run.h"
#include "coordinator/generation_tracker.h"
#include "coordinator/queued_write_reactor.h"
#include "coordinator/request_builder.h"
#include "coordinator/step_driver.h"
#include "grpcpp/server_context.h"
#include "proto/inference.pb.h"

namespace weir::coordinator {

class InferenceService;

class GenerateCall final : public QueuedWriteReactor<v1::GenerateEvent> {
 public:
  // Messages written ahead of a client that does not read: past this the
  // call is cancelled in the driver and ends RESOURCE_EXHAUSTED (the
  // coordinator's memory stays bounded; the step loop never waits).
  static constexpr size_t kMaxBacklog = 8192;

  // Starts serving `request`; returns the reactor for gRPC. Does not take
  // ownership; `service` must outlive every call (InferenceService's
  // destructor waits for its executor).
  static grpc::ServerWriteReactor<v1::GenerateEvent>* Start(InferenceService& service,
                                                             const v1::GenerateRequest* request);

 private:
  GenerateCall(InferenceService& service, const v1::GenerateRequest* request)
      : service_(service), request_(*request) {}

  // Validates, tokenizes and submits every sample (executor task).
  void Admit();
  // Posts a Drain unless one is pending (any thread: the step loop's listener).
  void Kick();
  // Applies every queued event and queues the messages (executor task).
  void Drain();
  // Cancels the samples still running in the driver.
  void CancelRunning() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends the call with `status` once the queued messages are written.
  void End(grpc::Status status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Forgets the client's request_id (Cancel by id no longer finds it).
  void ReleaseClientId() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  void OnCancel() override;
  void OnWriteFailed() override ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OnCallDone() override;

  InferenceService& service_;
  // Owned by gRPC until OnDone; read only before finishing().
  const v1::GenerateRequest& request_;
  std::weak_ptr<GenerateCall> weak_self_;
  std::atomic<bool> drain_posted_{false};
  StepDriver* driver_ ABSL_GUARDED_BY(mu_) = nullptr;
  bool stream_tokens_ ABSL_GUARDED_BY(mu_) = false;
  // Sample i: its request (trackers refer to it), server id, state, tracker.
  std::vector<BuiltRequest> samples_ ABSL_GUARDED_BY(mu_);
  std::vector<RequestId> ids_ ABSL_GUARDED_BY(mu_);
  std::vector<bool> running_ ABSL_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<GenerationTracker>> trackers_ ABSL_GUARDED_BY(mu_);
  size_t left_ ABSL_GUARDED_BY(mu_) = 0;
  std::shared_ptr<SeqEventQueue> queue_;
  std::string client_id_ ABSL_GUARDED_BY(mu_);
};

class GenerateBatchCall final : public QueuedWriteReactor<v1::BatchEvent> {
 public:
  // Messages written ahead of a slow client before no more items are
  // admitted (a slow reader slows only its own batch).
  static constexpr size_t kMaxBacklog = 256;

  // As GenerateCall::Start.
  static grpc::ServerWriteReactor<v1::BatchEvent>* Start(InferenceService& service,
                                                          const v1::GenerateBatchRequest* request);

 private:
  GenerateBatchCall(InferenceService& service, const v1::GenerateBatchRequest* request)
      : service_(service), request_(*request) {}

  void Admit();
  void Kick();
  void Drain();

  void OnCancel() override;
  void OnWriteFailed() override ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OnWritten() override ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  InferenceService& service_;
  const v1::GenerateBatchRequest& request_;
  std::weak_ptr<GenerateBatchCall> weak_self_;
  std::atomic<bool> drain_posted_{false};
  std::optional<BatchRun> run_ ABSL_GUARDED_BY(mu_);
  // Admission paused for the backlog: the next written message resumes it.
  bool held_back_ ABSL_GUARDED_BY(mu_) = false;
  // The earliest timer posted for the run (InfiniteFuture: none pending).
  absl::Time timer_at_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
};

}  // namespace weir::coordinator

#endif  // WEIR_COORDINATOR_GENERATE_CALL_H_
