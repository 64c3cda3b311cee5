#include "coordinator/inference_service.h"

#include <deque>
#include <map>
#include <optional>

#include "absl/container/flat_hash_set.h"
#include "absl/cleanup/cleanup.h"
#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "coordinator/tokenizer/chat_template.h"
#include "coordinator/tokenizer/incremental_decoder.h"

namespace weir::coordinator {
namespace {

constexpr char kVersion[] = "weir 0.1.0";
constexpr char kNoBatch[] =
    "GenerateBatch is not available yet: send the items as separate Generate calls";
constexpr char kNoBatchJobs[] =
    "batch jobs are not available yet: submit items with Generate";

v1::Lifecycle ToProto(ClusterLifecycle lifecycle) {
  switch (lifecycle) {
    case ClusterLifecycle::kStarting: return v1::LIFECYCLE_STARTING;
    case ClusterLifecycle::kReady: return v1::LIFECYCLE_READY;
    case ClusterLifecycle::kDegraded: return v1::LIFECYCLE_DEGRADED;
    case ClusterLifecycle::kDraining: return v1::LIFECYCLE_DRAINING;
    case ClusterLifecycle::kStopping: return v1::LIFECYCLE_STOPPING;
  }
  return v1::LIFECYCLE_UNSPECIFIED;
}

grpc::Status ToGrpc(const absl::Status& status) {
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

v1::WorkerState ToProto(WorkerStatus status) {
  switch (status) {
    case WorkerStatus::kRegistered: return v1::WORKER_STATE_REGISTERED;
    case WorkerStatus::kLoading: return v1::WORKER_STATE_LOADING;
    case WorkerStatus::kReady: return v1::WORKER_STATE_READY;
    case WorkerStatus::kDead: return v1::WORKER_STATE_DEAD;
    case WorkerStatus::kStopped: return v1::WORKER_STATE_STOPPED;
  }
  return v1::WORKER_STATE_UNSPECIFIED;
}

}  // namespace

InferenceService::InferenceService(ModelSummary model, ClusterState& cluster, ApiLimits limits,
                                   std::unique_ptr<tokenizer::Tokenizer> tokenizer,
                                   std::string tokenizer_fingerprint)
    : model_(std::move(model)),
      cluster_(cluster),
      limits_(limits),
      tokenizer_(std::move(tokenizer)),
      tokenizer_fingerprint_(std::move(tokenizer_fingerprint)) {}

grpc::Status InferenceService::CheckModel(const std::string& model) const {
  if (model.empty() || model == model_.name) return grpc::Status::OK;
  return grpc::Status(grpc::StatusCode::NOT_FOUND,
                      "unknown model \"" + model + "\"; this server serves \"" + model_.name + "\"");
}

namespace {

// The events of one request, filled by the driver thread, drained by the
// gRPC handler. Shared because the driver may deliver after the handler left.
class EventQueue {
 public:
  void Push(const SeqEvent& event) {
    absl::MutexLock lock(&mu_);
    events_.push_back(event);
  }
  // Waits up to `timeout` for an event.
  std::optional<SeqEvent> Pop(absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !events_.empty(); };
    if (!mu_.AwaitWithTimeout(absl::Condition(&ready), timeout)) return std::nullopt;
    SeqEvent event = std::move(events_.front());
    events_.pop_front();
    return event;
  }

 private:
  absl::Mutex mu_;
  std::deque<SeqEvent> events_ ABSL_GUARDED_BY(mu_);
};

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

grpc::Status InferenceService::Generate(grpc::ServerContext* context,
                                        const v1::GenerateRequest* request,
                                        grpc::ServerWriter<v1::GenerateEvent>* writer) {
  StepDriver* driver = driver_.load();
  if (driver == nullptr) {
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the server is not ready");
  }
  if (grpc::Status s = CheckModel(request->model()); !s.ok()) return s;
  const absl::Time start = absl::Now();
  RequestLimits limits;
  {
    absl::MutexLock lock(&mu_);
    limits = request_limits_;
  }
  const RequestId id(next_request_.fetch_add(1));
  absl::StatusOr<BuiltRequest> built =
      BuildRequest(*request, limits, tokenizer_.get(),
                   absl::Uniform<uint64_t>(absl::BitGen(), 0, UINT64_MAX) ^ id.value());
  if (!built.ok()) return ToGrpc(built.status());
  const std::string client_id = request->request_id();
  if (!client_id.empty()) {
    absl::MutexLock lock(&mu_);
    if (!in_flight_.emplace(client_id, id).second) {
      return grpc::Status(grpc::StatusCode::ALREADY_EXISTS,
                          "request_id \"" + client_id + "\" is already in flight");
    }
  }
  auto forget = absl::MakeCleanup([&] {
    if (client_id.empty()) return;
    absl::MutexLock lock(&mu_);
    in_flight_.erase(client_id);
  });

  auto queue = std::make_shared<EventQueue>();
  SeqSubmission submission;
  submission.request = scheduler::SeqRequest{.id = id,
                                             .prompt = built->prompt,
                                             .max_new_tokens = built->max_new_tokens,
                                             .min_new_tokens = built->min_new_tokens,
                                             .stop_token_ids = built->stop_token_ids,
                                             .ignore_eos = built->ignore_eos};
  submission.sampling = built->sampling;
  submission.seed = built->seed;
  submission.sink = [queue](const SeqEvent& event) { queue->Push(event); };
  if (absl::Status s = driver->Submit(std::move(submission)); !s.ok()) return ToGrpc(s);

  v1::GenerateEvent accepted;
  accepted.mutable_accepted()->set_server_request_id(absl::StrCat("weir-", id.value()));
  accepted.mutable_accepted()->set_model_revision(model_.revision);
  accepted.mutable_accepted()->set_prompt_tokens(built->prompt.size());
  writer->Write(accepted);

  std::optional<tokenizer::IncrementalDecoder> decoder;
  if (tokenizer_ != nullptr && built->return_text) {
    decoder.emplace(*tokenizer_, tokenizer::IncrementalDecoderOptions{
                                     .skip_special_tokens = built->skip_special_tokens,
                                     .stop_strings = built->stop_strings,
                                     .include_stop_in_output = built->include_stop_in_output});
  }
  std::vector<uint32_t> all_ids;
  std::string all_text;
  std::optional<absl::Time> first_token;
  while (true) {
    std::optional<SeqEvent> event = queue->Pop(absl::Milliseconds(50));
    if (!event.has_value()) {
      if (context->IsCancelled()) {
        driver->Cancel(id).IgnoreError();
        return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled by the client");
      }
      continue;
    }
    if (!event->error.ok()) {
      if (!all_ids.empty()) {
        return grpc::Status(grpc::StatusCode::ABORTED,
                            absl::StrCat("failed after ", all_ids.size(),
                                         " tokens: ", event->error.message()));
      }
      return ToGrpc(event->error);
    }
    v1::GenerateEvent delta;
    scheduler::FinishReason finish = event->finish;
    bool stop_string = false;
    for (uint32_t token : event->tokens) {
      if (!first_token) first_token = absl::Now();
      all_ids.push_back(token);
      if (built->return_token_ids) delta.mutable_delta()->add_token_ids(token);
      if (decoder.has_value() && !decoder->stopped()) {
        delta.mutable_delta()->mutable_text()->append(decoder->Add(static_cast<int32_t>(token)));
        if (decoder->stopped()) {
          stop_string = true;
          break;
        }
      }
    }
    if (stop_string && finish == scheduler::FinishReason::kNone) {
      driver->Cancel(id).IgnoreError();
    }
    const bool done = finish != scheduler::FinishReason::kNone || stop_string;
    if (done && decoder.has_value()) {
      delta.mutable_delta()->mutable_text()->append(decoder->Finish());
    }
    all_text += delta.delta().text();
    if (built->stream_tokens &&
        (delta.delta().token_ids_size() > 0 || !delta.delta().text().empty())) {
      if (!writer->Write(delta)) {
        driver->Cancel(id).IgnoreError();
        return grpc::Status(grpc::StatusCode::CANCELLED, "the client went away");
      }
    }
    if (!done) continue;
    v1::GenerateEvent final_event;
    v1::GenerateEvent::Final* out = final_event.mutable_final();
    if (stop_string) {
      out->set_reason(v1::FINISH_REASON_STOP_SEQUENCE);
      out->set_stop_text(built->stop_strings[decoder->stop_index()]);
    } else {
      out->set_reason(ToProto(finish));
      if (finish == scheduler::FinishReason::kStopToken && !all_ids.empty()) {
        out->set_stop_token_id(all_ids.back());
      }
    }
    if (!built->stream_tokens) {
      out->set_full_text(all_text);
      if (built->return_token_ids) {
        for (uint32_t t : all_ids) out->add_full_token_ids(t);
      }
    }
    out->mutable_usage()->set_prompt_tokens(built->prompt.size());
    out->mutable_usage()->set_completion_tokens(all_ids.size());
    out->mutable_timings()->set_total_ms(absl::ToDoubleMilliseconds(absl::Now() - start));
    if (first_token) {
      out->mutable_timings()->set_ttft_ms(absl::ToDoubleMilliseconds(*first_token - start));
    }
    writer->Write(final_event);
    return grpc::Status::OK;
  }
}

grpc::Status InferenceService::GenerateBatch(grpc::ServerContext* context,
                                             const v1::GenerateBatchRequest* request,
                                             grpc::ServerWriter<v1::BatchEvent>* writer) {
  return grpc::Status(grpc::StatusCode::UNIMPLEMENTED, kNoBatch);
}

grpc::Status InferenceService::Cancel(grpc::ServerContext* context,
                                      const v1::CancelRequest* request,
                                      v1::CancelResponse* response) {
  if (request->request_ids().empty() && !request->has_batch_id()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "Cancel: give request_ids or batch_id");
  }
  if (static_cast<uint32_t>(request->request_ids_size()) > limits_.max_cancel_ids) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "Cancel: more than " + std::to_string(limits_.max_cancel_ids) + " ids");
  }
  StepDriver* driver = driver_.load();
  absl::flat_hash_set<std::string> seen;
  for (const std::string& client_id : request->request_ids()) {
    if (!seen.insert(client_id).second) continue;
    v1::CancelResponse::Result* result = response->add_results();
    result->set_id(client_id);
    std::optional<RequestId> id;
    {
      absl::MutexLock lock(&mu_);
      auto it = in_flight_.find(client_id);
      if (it != in_flight_.end()) id = it->second;
    }
    const bool cancelled = id.has_value() && driver != nullptr && driver->Cancel(*id).ok();
    result->set_outcome(cancelled ? v1::CancelResponse::OUTCOME_CANCELLED
                                  : v1::CancelResponse::OUTCOME_NOT_FOUND);
  }
  return grpc::Status::OK;
}

grpc::Status InferenceService::Tokenize(grpc::ServerContext* context,
                                        const v1::TokenizeRequest* request,
                                        v1::TokenizeResponse* response) {
  if (grpc::Status s = CheckModel(request->model()); !s.ok()) return s;
  if (tokenizer_ == nullptr) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        "Tokenize: the served model has no tokenizer.json");
  }
  absl::StatusOr<std::vector<int32_t>> ids;
  switch (request->input_case()) {
    case v1::TokenizeRequest::kText:
      ids = tokenizer_->Encode(request->text(), request->add_special_tokens());
      break;
    case v1::TokenizeRequest::kChat: {
      const std::map<std::string, std::string> kwargs(request->chat().template_kwargs().begin(),
                                                      request->chat().template_kwargs().end());
      absl::StatusOr<tokenizer::ChatOptions> options = tokenizer::ParseTemplateKwargs(kwargs);
      if (!options.ok()) return ToGrpc(options.status());
      std::vector<tokenizer::ChatMessage> messages;
      for (const v1::ChatMessage& m : request->chat().messages()) {
        messages.push_back({m.role(), m.content()});
      }
      ids = tokenizer::EncodeChat(*tokenizer_, messages, *options);
      break;
    }
    default:
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "Tokenize: give text or chat");
  }
  if (!ids.ok()) return ToGrpc(ids.status());
  for (int32_t id : *ids) {
    response->add_ids(static_cast<uint32_t>(id));
    if (request->return_pieces()) {
      // Pieces are raw byte strings; a proto string must be valid UTF-8, so
      // the decoded text of each id is returned (U+FFFD for partial bytes).
      response->add_pieces(tokenizer_->Decode(std::span<const int32_t>(&id, 1), false));
    }
  }
  response->set_count(static_cast<uint32_t>(ids->size()));
  return grpc::Status::OK;
}

grpc::Status InferenceService::GetModelInfo(grpc::ServerContext* context,
                                            const v1::GetModelInfoRequest* request,
                                            v1::ModelInfo* response) {
  if (grpc::Status s = CheckModel(request->model()); !s.ok()) return s;
  response->set_name(model_.name);
  response->set_revision(model_.revision);
  response->set_tokenizer_fingerprint(tokenizer_fingerprint_);
  response->set_quantization(model_.quantization);
  response->set_max_context_tokens(model_.max_context_tokens);
  response->set_max_prompt_tokens(model_.max_context_tokens);
  response->set_max_new_tokens_limit(model_.max_context_tokens);
  response->set_vocab_size(model_.vocab_size);
  for (int64_t eos : model_.eos_token_ids) response->add_eos_token_ids(eos);
  if (model_.bos_token_id) response->set_bos_token_id(*model_.bos_token_id);
  if (model_.pad_token_id) response->set_pad_token_id(*model_.pad_token_id);
  v1::ModelInfo::Features* f = response->mutable_features();
  f->set_max_top_logprobs(limits_.max_top_logprobs);
  f->set_max_num_samples(limits_.max_num_samples);
  f->set_max_stop_sequences(limits_.max_stop_sequences);
  f->set_max_stop_string_len(limits_.max_stop_string_len);
  f->set_max_logit_bias_entries(limits_.max_logit_bias_entries);
  f->set_max_batch_items(limits_.max_batch_items);
  f->set_max_request_bytes(limits_.max_request_bytes);
  f->set_max_schema_bytes(limits_.max_schema_bytes);
  v1::ModelInfo::Parallelism* p = response->mutable_parallelism();
  p->set_tp(1);
  p->set_pp(1);
  p->set_dp(cluster_.world_size());
  p->set_ep(cluster_.world_size());
  p->set_num_experts(model_.num_routed_experts);
  return grpc::Status::OK;
}

grpc::Status InferenceService::GetServerState(grpc::ServerContext* context,
                                              const v1::GetServerStateRequest* request,
                                              v1::ServerState* response) {
  const ClusterLifecycle lifecycle = cluster_.lifecycle();
  response->set_lifecycle(ToProto(lifecycle));
  response->set_version(kVersion);
  response->set_uptime_s(absl::ToDoubleSeconds(absl::Now() - start_time_));
  response->set_eplb_address(cluster_.eplb_address());
  response->set_expert_map_version(cluster_.expert_map_version());
  for (const WorkerRecord& w : cluster_.Workers()) {
    v1::ServerState::Worker* out = response->add_workers();
    out->set_rank(w.rank.value());
    out->set_address(w.address);
    out->set_state(ToProto(w.status));
    out->set_detail(w.detail);
    out->set_pid(w.pid);
  }
  // Every worker is one DP rank of the group; the group is READY only if all are.
  ClusterLifecycle group_state = lifecycle;
  if (!cluster_.AllReady() && lifecycle == ClusterLifecycle::kReady) {
    group_state = ClusterLifecycle::kDegraded;
  }
  StepDriver* driver = driver_.load();
  std::vector<scheduler::RankLoad> loads;
  if (driver != nullptr) {
    loads = driver->Loads();
    response->set_preemptions(driver->preemptions());
    response->set_steps(driver->steps());
  }
  const size_t groups = std::max<size_t>(loads.size(), 1);
  for (size_t g = 0; g < groups; ++g) {
    v1::ServerState::Group* group = response->add_per_group();
    group->set_id(static_cast<uint32_t>(g));
    group->set_state(ToProto(group_state));
    if (g < loads.size()) {
      group->set_running(static_cast<uint32_t>(loads[g].num_running + loads[g].num_prefilling));
      group->set_waiting(static_cast<uint32_t>(loads[g].num_waiting));
      if (loads[g].num_blocks > 0) {
        group->set_kv_usage(static_cast<float>(loads[g].num_used_blocks) /
                            static_cast<float>(loads[g].num_blocks));
      }
    }
  }
  v1::ServerState::Admission* admission = response->mutable_admission();
  admission->set_limit_requests(0);
  admission->set_limit_tokens(0);
  return grpc::Status::OK;
}

grpc::Status BatchJobsService::CreateBatchJob(grpc::ServerContext*,
                                              const v1::CreateBatchJobRequest*, v1::BatchJob*) {
  return grpc::Status(grpc::StatusCode::UNIMPLEMENTED, kNoBatchJobs);
}
grpc::Status BatchJobsService::GetBatchJob(grpc::ServerContext*, const v1::GetBatchJobRequest*,
                                           v1::BatchJob*) {
  return grpc::Status(grpc::StatusCode::UNIMPLEMENTED, kNoBatchJobs);
}
grpc::Status BatchJobsService::ListBatchJobs(grpc::ServerContext*,
                                             const v1::ListBatchJobsRequest*,
                                             v1::ListBatchJobsResponse*) {
  return grpc::Status(grpc::StatusCode::UNIMPLEMENTED, kNoBatchJobs);
}
grpc::Status BatchJobsService::CancelBatchJob(grpc::ServerContext*,
                                              const v1::CancelBatchJobRequest*, v1::BatchJob*) {
  return grpc::Status(grpc::StatusCode::UNIMPLEMENTED, kNoBatchJobs);
}
grpc::Status BatchJobsService::ReadBatchResults(grpc::ServerContext*,
                                                const v1::ReadBatchResultsRequest*,
                                                grpc::ServerWriter<v1::BatchItemResult>*) {
  return grpc::Status(grpc::StatusCode::UNIMPLEMENTED, kNoBatchJobs);
}

}  // namespace weir::coordinator
