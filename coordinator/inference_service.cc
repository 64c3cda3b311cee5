#include "coordinator/inference_service.h"

#include <deque>
#include <map>
#include <optional>

#include "absl/container/flat_hash_set.h"
#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "base/logging.h"
#include "coordinator/api_error.h"
#include "coordinator/batch_run.h"
#include "coordinator/generate_call.h"
#include "coordinator/generation_tracker.h"
#include "grammar/structured_output.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/incremental_decoder.h"

namespace weir::coordinator {
namespace {

constexpr char kVersion[] = "weir 0.1.0";

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

// With the error details of api.md §2.4 (reason, bad field, retry hint).
grpc::Status ToGrpc(const absl::Status& status) { return ToApiStatus(status); }

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
                                   std::string tokenizer_fingerprint, int call_threads)
    : model_(std::move(model)),
      cluster_(cluster),
      limits_(limits),
      tokenizer_(std::move(tokenizer)),
      tokenizer_fingerprint_(std::move(tokenizer_fingerprint)),
      executor_(call_threads) {
  if (tokenizer_ == nullptr) return;
  std::vector<int32_t> eos(model_.eos_token_ids.begin(), model_.eos_token_ids.end());
  absl::StatusOr<std::shared_ptr<const grammar::Vocabulary>> vocab =
      grammar::BuildGrammarVocabulary(*tokenizer_, model_.vocab_size, std::move(eos));
  if (!vocab.ok()) {
    WEIR_LOG(WARNING) << "structured output is off: " << vocab.status();
    return;
  }
  // Admission only checks that a constraint compiles; the workers build the
  // token caches they use, so none are precomputed here.
  grammar_ = std::make_unique<grammar::GrammarCompiler>(
      *vocab, grammar::CompilerOptions{.cache_bytes = 128ll << 20,
                                       .num_threads = 1,
                                       .precompute_budget = absl::ZeroDuration()});
}

RequestLimits InferenceService::CurrentLimits() {
  RequestLimits limits;
  {
    absl::MutexLock lock(&mu_);
    limits = request_limits_;
  }
  // What ModelInfo advertises is what admission enforces.
  limits.max_num_samples = limits_.max_num_samples;
  limits.max_stop_sequences = limits_.max_stop_sequences;
  limits.max_stop_string_len = limits_.max_stop_string_len;
  limits.max_logit_bias_entries = limits_.max_logit_bias_entries;
  limits.max_top_logprobs = limits_.max_top_logprobs;
  limits.max_schema_bytes = limits_.max_schema_bytes;
  limits.max_labels = limits_.max_labels;
  return limits;
}

absl::StatusOr<BuiltRequest> InferenceService::BuildItem(const v1::GenerateRequest& request) {
  if (!request.model().empty() && request.model() != model_.name) {
    return absl::NotFoundError("unknown model \"" + request.model() + "\"");
  }
  RequestLimits limits = CurrentLimits();
  limits.grammar = grammar_.get();
  absl::StatusOr<BuiltRequest> built = BuildRequest(
      request, limits, tokenizer_.get(), absl::Uniform<uint64_t>(absl::BitGen(), 0, UINT64_MAX));
  return built;
}

grpc::Status InferenceService::CheckModel(const std::string& model) const {
  if (model.empty() || model == model_.name) return grpc::Status::OK;
  return grpc::Status(grpc::StatusCode::NOT_FOUND,
                      "unknown model \"" + model + "\"; this server serves \"" + model_.name + "\"");
}


grpc::ServerWriteReactor<v1::GenerateEvent>* InferenceService::Generate(
    grpc::CallbackServerContext* context, const v1::GenerateRequest* request) {
  return GenerateCall::Start(*this, request);
}

grpc::ServerWriteReactor<v1::BatchEvent>* InferenceService::GenerateBatch(
    grpc::CallbackServerContext* context, const v1::GenerateBatchRequest* request) {
  return GenerateBatchCall::Start(*this, request);
}

grpc::ServerUnaryReactor* InferenceService::Cancel(grpc::CallbackServerContext* context,
                                                   const v1::CancelRequest* request,
                                                   v1::CancelResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(DoCancel(*request, response));
  return reactor;
}

grpc::ServerUnaryReactor* InferenceService::Tokenize(grpc::CallbackServerContext* context,
                                                     const v1::TokenizeRequest* request,
                                                     v1::TokenizeResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  // A long text takes a while to encode: not on gRPC's shared threads.
  executor_.Post([this, request, response, reactor] {
    reactor->Finish(DoTokenize(*request, response));
  });
  return reactor;
}

grpc::ServerUnaryReactor* InferenceService::GetModelInfo(grpc::CallbackServerContext* context,
                                                         const v1::GetModelInfoRequest* request,
                                                         v1::ModelInfo* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(DoGetModelInfo(*request, response));
  return reactor;
}

grpc::ServerUnaryReactor* InferenceService::GetServerState(
    grpc::CallbackServerContext* context, const v1::GetServerStateRequest* request,
    v1::ServerState* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(DoGetServerState(response));
  return reactor;
}

grpc::Status InferenceService::DoCancel(const v1::CancelRequest& cancel,
                                        v1::CancelResponse* response) {
  const v1::CancelRequest* request = &cancel;
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
    std::vector<RequestId> ids;
    {
      absl::MutexLock lock(&mu_);
      auto it = in_flight_.find(client_id);
      if (it != in_flight_.end()) ids = it->second;
    }
    bool cancelled = false;
    for (RequestId id : ids) cancelled |= driver != nullptr && driver->Cancel(id).ok();
    result->set_outcome(cancelled ? v1::CancelResponse::OUTCOME_CANCELLED
                                  : v1::CancelResponse::OUTCOME_NOT_FOUND);
  }
  return grpc::Status::OK;
}

grpc::Status InferenceService::DoTokenize(const v1::TokenizeRequest& tokenize,
                                          v1::TokenizeResponse* response) {
  const v1::TokenizeRequest* request = &tokenize;
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

grpc::Status InferenceService::DoGetModelInfo(const v1::GetModelInfoRequest& info,
                                              v1::ModelInfo* response) {
  const v1::GetModelInfoRequest* request = &info;
  if (grpc::Status s = CheckModel(request->model()); !s.ok()) return s;
  response->set_name(model_.name);
  response->set_revision(model_.revision);
  response->set_tokenizer_fingerprint(tokenizer_fingerprint_);
  response->set_quantization(model_.quantization);
  response->set_max_context_tokens(model_.max_context_tokens);
  // The limits BuildRequest enforces (request_builder.h).
  response->set_max_prompt_tokens(MaxPromptTokens(model_.max_context_tokens));
  response->set_max_new_tokens_limit(MaxNewTokensLimit(model_.max_context_tokens));
  response->set_vocab_size(model_.vocab_size);
  for (int64_t eos : model_.eos_token_ids) response->add_eos_token_ids(eos);
  if (model_.bos_token_id) response->set_bos_token_id(*model_.bos_token_id);
  if (model_.pad_token_id) response->set_pad_token_id(*model_.pad_token_id);
  v1::ModelInfo::Features* f = response->mutable_features();
  if (grammar_ != nullptr) {
    for (const std::string& kind : grammar::StructuredOutputKinds()) {
      f->add_structured_output_kinds(kind);
    }
  }
  f->set_max_top_logprobs(limits_.max_top_logprobs);
  f->set_prompt_logprobs(limits_.max_top_logprobs > 0);
  f->set_max_num_samples(limits_.max_num_samples);
  f->set_max_stop_sequences(limits_.max_stop_sequences);
  f->set_max_stop_string_len(limits_.max_stop_string_len);
  f->set_max_logit_bias_entries(limits_.max_logit_bias_entries);
  f->set_max_batch_items(limits_.max_batch_items);
  f->set_max_request_bytes(limits_.max_request_bytes);
  f->set_max_schema_bytes(limits_.max_schema_bytes);
  f->set_max_labels(limits_.max_labels);
  v1::ModelInfo::Parallelism* p = response->mutable_parallelism();
  p->set_tp(1);
  p->set_pp(1);
  p->set_dp(cluster_.world_size());
  p->set_ep(cluster_.world_size());
  p->set_num_experts(model_.num_routed_experts);
  return grpc::Status::OK;
}

grpc::Status InferenceService::DoGetServerState(v1::ServerState* response) {
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
  for (const RejoinWait& wait : cluster_.RejoinWaits()) {
    v1::ServerState::WaitingRank* out = response->add_waiting_ranks();
    out->set_rank(static_cast<uint32_t>(wait.rank.value()));
    for (auto [t, ts] : {std::pair{wait.since, out->mutable_since()},
                         std::pair{wait.deadline, out->mutable_deadline()}}) {
      const int64_t micros = absl::ToUnixMicros(t);
      ts->set_seconds(micros / 1000000);
      ts->set_nanos(static_cast<int32_t>(micros % 1000000) * 1000);
    }
    out->set_previous_address(wait.previous_address);
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
    response->set_forked_samples(static_cast<uint64_t>(driver->forks()));
    response->set_steps(driver->steps());
    response->set_kv_checks(driver->kv_checks());
    if (const StepDriver::SpeculationStats spec = driver->speculation();
        !spec.accepted_histogram.empty()) {
      v1::ServerState::Speculation* out = response->mutable_speculation();
      out->set_num_draft_tokens(static_cast<uint32_t>(spec.accepted_histogram.size() - 1));
      for (int64_t n : spec.accepted_histogram) {
        out->add_accepted_histogram(static_cast<uint64_t>(n));
      }
      out->set_verified_drafts(static_cast<uint64_t>(spec.verified_drafts));
      int64_t verifications = 0;
      for (int64_t n : spec.accepted_histogram) verifications += n;
      out->set_mean_verify_length(verifications > 0 ? static_cast<double>(spec.verified_drafts) /
                                                          static_cast<double>(verifications)
                                                    : 0.0);
      out->set_verify_length(spec.verify_length);
      out->set_method(spec.method);
      out->set_paused_steps(static_cast<uint64_t>(spec.paused_steps));
      out->set_lookup_verifications(static_cast<uint64_t>(spec.lookup_verifications));
      out->set_lookup_accepted_drafts(static_cast<uint64_t>(spec.lookup_accepted));
    }
    const StepDriver::RecoveryStats recoveries = driver->Recoveries();
    v1::ServerState::Recoveries* out = response->mutable_recoveries();
    out->set_count(static_cast<uint64_t>(recoveries.recoveries));
    out->set_last_cause(recoveries.last_cause);
    out->set_last_seconds(absl::ToDoubleSeconds(recoveries.last_duration));
    out->set_last_detect_to_serving_s(absl::ToDoubleSeconds(recoveries.last_detect_to_serving));
    out->set_group_epoch(cluster_.group_epoch());
    if (absl::Status failed = driver->failure(); !failed.ok()) {
      response->set_failure(failed.ToString());
    }
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
      group->set_kv_blocks_total(static_cast<uint64_t>(loads[g].num_blocks));
      group->set_kv_blocks_used(static_cast<uint64_t>(loads[g].num_used_blocks));
      group->set_kv_blocks_free(static_cast<uint64_t>(loads[g].num_free_blocks));
      group->set_kv_block_tokens(static_cast<uint32_t>(loads[g].block_tokens));
      group->set_seq_slots_total(static_cast<uint32_t>(loads[g].num_seq_slots));
      group->set_seq_slots_free(static_cast<uint32_t>(loads[g].num_free_slots));
    }
  }
  v1::ServerState::Admission* admission = response->mutable_admission();
  if (driver != nullptr) {
    const StepDriver::AdmissionLoad load = driver->Admission();
    admission->set_queued_requests(static_cast<uint32_t>(load.requests));
    admission->set_queued_tokens(static_cast<uint64_t>(load.prompt_tokens));
    admission->set_limit_requests(static_cast<uint32_t>(load.limit_requests));
    admission->set_limit_tokens(static_cast<uint64_t>(load.limit_prompt_tokens));
  }
  return grpc::Status::OK;
}

}  // namespace weir::coordinator
