// coordinator/inference_service.h
//
// InferenceService implements the public weir.v1.Inference API (batch jobs
// are BatchJobsService, which runs its items through BuildItem and the
// driver). Model info and server state are served
// from the model summary and the cluster registry, Tokenize from the model's
// tokenizer and chat template. Generate validates and tokenizes the request,
// submits it to the StepDriver and streams its tokens back; it answers
// UNAVAILABLE until the driver is set (workers ready). With a tokenizer,
// structured-output constraints are compiled once at admission by the
// service's GrammarCompiler (bad ones are INVALID_ARGUMENT before anything is
// queued) and applied on the workers.
//
// The service uses gRPC's callback API: no call holds a thread while it
// waits. The unary calls answer on gRPC's thread (Tokenize on the executor);
// Generate and GenerateBatch are reactors (generate_call.h) whose admission
// and event handling run on the service's CallExecutor (`call_threads`
// threads), woken by the step loop's events. However many streams are open,
// the coordinator's thread count stays bounded.
//
// Thread safety: gRPC calls them from many threads; they read only immutable
// data, the thread-safe ClusterState and state under mu_.

#ifndef WEIR_COORDINATOR_INFERENCE_SERVICE_H_
#define WEIR_COORDINATOR_INFERENCE_SERVICE_H_

#include <atomic>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "base/model_summary.h"
#include "coordinator/call_executor.h"
#include "coordinator/cluster_state.h"
#include "coordinator/request_builder.h"
#include "coordinator/step_driver.h"
#include "grammar/compiler.h"
#include "proto/inference.grpc.pb.h"
#include "tokenizer/tokenizer.h"

namespace weir::coordinator {

// Limits advertised in ModelInfo.features and enforced at admission.
struct ApiLimits {
  // SamplingParams.num_samples (n) of a Generate call or a batch item.
  uint32_t max_num_samples = 16;
  uint32_t max_stop_sequences = 16;
  uint32_t max_stop_string_len = 256;
  uint32_t max_logit_bias_entries = 1024;
  // OutputOptions.top_logprobs and prompt_logprobs (features.prompt_logprobs
  // is on while this is not 0).
  uint32_t max_top_logprobs = 20;
  uint32_t max_batch_items = 50000;
  uint64_t max_request_bytes = 64 << 20;
  uint64_t max_schema_bytes = 1 << 20;
  uint32_t max_cancel_ids = 1024;
  // GenerateRequest.labels entries (keys 1..64 bytes, values <= 512 bytes).
  uint32_t max_labels = 16;
};

class InferenceService final : public v1::Inference::CallbackService {
 public:
  // Does not take ownership; `cluster` must outlive the service. `tokenizer`
  // may be null (a model without tokenizer.json): Tokenize then answers
  // FAILED_PRECONDITION.
  // `call_threads` (at least 1) run the streaming calls' admission and
  // events.
  InferenceService(ModelSummary model, ClusterState& cluster, ApiLimits limits,
                   std::unique_ptr<tokenizer::Tokenizer> tokenizer = nullptr,
                   std::string tokenizer_fingerprint = "", int call_threads = 4);

  // Makes Generate available. Does not take ownership; `driver` must outlive
  // the service or be reset to null first.
  void SetDriver(StepDriver* driver) { driver_.store(driver); }
  void SetRequestLimits(const RequestLimits& limits) {
    absl::MutexLock lock(&mu_);
    request_limits_ = limits;
  }

  // For batch jobs: the step loop (null until ready or after shutdown), one
  // item built as GenerateBatch builds it (NOT_FOUND for another model,
  // INVALID_ARGUMENT from BuildRequest), server request ids, the tokenizer
  // (may be null) and the item limit.
  StepDriver* driver() const { return driver_.load(); }
  absl::StatusOr<BuiltRequest> BuildItem(const v1::GenerateRequest& request);
  RequestId NextRequestId() { return RequestId(next_request_.fetch_add(1)); }
  const tokenizer::Tokenizer* tokenizer() const { return tokenizer_.get(); }
  uint32_t max_batch_items() const { return limits_.max_batch_items; }

  // The gRPC callback handlers.
  grpc::ServerWriteReactor<v1::GenerateEvent>* Generate(
      grpc::CallbackServerContext* context, const v1::GenerateRequest* request) override;
  grpc::ServerWriteReactor<v1::BatchEvent>* GenerateBatch(
      grpc::CallbackServerContext* context, const v1::GenerateBatchRequest* request) override;
  grpc::ServerUnaryReactor* Cancel(grpc::CallbackServerContext* context,
                                   const v1::CancelRequest* request,
                                   v1::CancelResponse* response) override;
  grpc::ServerUnaryReactor* Tokenize(grpc::CallbackServerContext* context,
                                     const v1::TokenizeRequest* request,
                                     v1::TokenizeResponse* response) override;
  grpc::ServerUnaryReactor* GetModelInfo(grpc::CallbackServerContext* context,
                                         const v1::GetModelInfoRequest* request,
                                         v1::ModelInfo* response) override;
  grpc::ServerUnaryReactor* GetServerState(grpc::CallbackServerContext* context,
                                           const v1::GetServerStateRequest* request,
                                           v1::ServerState* response) override;

  // The threads of the streaming calls.
  CallExecutor& executor() { return executor_; }

 private:
  friend class GenerateCall;
  friend class GenerateBatchCall;

  grpc::Status DoCancel(const v1::CancelRequest& request, v1::CancelResponse* response);
  grpc::Status DoTokenize(const v1::TokenizeRequest& request, v1::TokenizeResponse* response);
  grpc::Status DoGetModelInfo(const v1::GetModelInfoRequest& request, v1::ModelInfo* response);
  grpc::Status DoGetServerState(v1::ServerState* response);

  // The request limits, with the advertised ApiLimits applied.
  RequestLimits CurrentLimits();
  // OK if `model` is empty or names the served model; NOT_FOUND otherwise.
  grpc::Status CheckModel(const std::string& model) const;

  const ModelSummary model_;
  ClusterState& cluster_;
  const ApiLimits limits_;
  const std::unique_ptr<tokenizer::Tokenizer> tokenizer_;
  const std::string tokenizer_fingerprint_;
  // Checks constraints against the served vocabulary; null without tokenizer.
  std::unique_ptr<grammar::GrammarCompiler> grammar_;
  const absl::Time start_time_ = absl::Now();
  std::atomic<StepDriver*> driver_{nullptr};
  std::atomic<uint64_t> next_request_{1};
  absl::Mutex mu_;
  // Guarded by mu_: client request ids in flight -> server ids (one per sample).
  absl::flat_hash_map<std::string, std::vector<RequestId>> in_flight_ ABSL_GUARDED_BY(mu_);
  RequestLimits request_limits_ ABSL_GUARDED_BY(mu_);
  // Last: destroyed first, while what its tasks use still exists.
  CallExecutor executor_;
};

}  // namespace weir::coordinator

#endif  // WEIR_COORDINATOR_INFERENCE_SERVICE_H_
