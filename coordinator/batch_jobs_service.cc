#include "coordinator/batch_jobs_service.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "absl/container/flat_hash_set.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "absl/random/random.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/logging.h"
#include "coordinator/api_error.h"
#include "coordinator/batch_run.h"
#include "coordinator/inference_service.h"
#include "coordinator/jsonl_batch.h"
#include "coordinator/sample_set.h"

namespace weir::coordinator {
namespace {

constexpr size_t kMaxInputFileBytes = size_t{256} << 20;
constexpr int kMaxLabels = 16;
constexpr int kDefaultPageSize = 20;
constexpr int kMaxPageSize = 100;
constexpr char kFileScheme[] = "file://";

grpc::Status ToGrpc(const absl::Status& status) {
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

bool IsTerminal(v1::BatchJobStatus status) {
  return status == v1::BATCH_JOB_STATUS_COMPLETED || status == v1::BATCH_JOB_STATUS_FAILED ||
         status == v1::BATCH_JOB_STATUS_EXPIRED || status == v1::BATCH_JOB_STATUS_CANCELLED;
}

void SetTime(google::protobuf::Timestamp* out, absl::Time t) {
  const int64_t nanos = absl::ToUnixNanos(t);
  out->set_seconds(nanos / 1000000000);
  out->set_nanos(static_cast<int32_t>(nanos % 1000000000));
}

void SetDuration(google::protobuf::Duration* out, absl::Duration d) {
  const int64_t nanos = absl::ToInt64Nanoseconds(d);
  out->set_seconds(nanos / 1000000000);
  out->set_nanos(static_cast<int32_t>(nanos % 1000000000));
}

void SetError(v1::ErrorStatus* out, const absl::Status& status) { ToErrorStatus(status, out); }

v1::BatchEvent::ItemResult ErrorResult(const v1::BatchItem& item, size_t index,
                                       const absl::Status& status) {
  v1::BatchEvent::ItemResult result;
  result.set_custom_id(item.custom_id());
  result.set_index(static_cast<uint32_t>(index));
  ToErrorStatus(status, result.mutable_error());
  return result;
}

std::string NewJobId() {
  absl::BitGen gen;
  return absl::StrCat("batch_", absl::Hex(absl::Uniform<uint64_t>(gen), absl::kZeroPad16));
}

absl::Status CheckItems(const std::vector<v1::BatchItem>& items, uint32_t max_items) {
  if (items.empty()) return absl::InvalidArgumentError("CreateBatchJob: no items");
  if (items.size() > max_items) {
    return absl::InvalidArgumentError(
        absl::StrCat("CreateBatchJob: ", items.size(), " items; at most ", max_items));
  }
  absl::flat_hash_set<std::string> ids;
  for (const v1::BatchItem& item : items) {
    if (item.custom_id().empty() || item.custom_id().size() > 64) {
      return absl::InvalidArgumentError("CreateBatchJob: custom_id must be 1..64 bytes");
    }
    if (!ids.insert(item.custom_id()).second) {
      return absl::InvalidArgumentError("CreateBatchJob: duplicate custom_id \"" +
                                        item.custom_id() + "\"");
    }
  }
  return absl::OkStatus();
}

// The backend over InferenceService.
class InferenceBackend final : public BatchItemBackend {
 public:
  explicit InferenceBackend(InferenceService& service) : service_(service) {}
  absl::Status Ready() const override {
    if (service_.driver() == nullptr) return absl::UnavailableError("the server is not ready");
    return absl::OkStatus();
  }
  uint32_t max_batch_items() const override { return service_.max_batch_items(); }
  absl::StatusOr<BuiltRequest> Build(const v1::GenerateRequest& request) override {
    return service_.BuildItem(request);
  }
  const tokenizer::Tokenizer* tokenizer() const override { return service_.tokenizer(); }
  RequestId NextId() override { return service_.NextRequestId(); }
  absl::Status SubmitGroup(std::vector<SeqSubmission> group) override {
    StepDriver* driver = service_.driver();
    if (driver == nullptr) return absl::UnavailableError("the server is stopping");
    return driver->SubmitGroup(std::move(group));
  }
  absl::Status Cancel(RequestId id) override {
    StepDriver* driver = service_.driver();
    if (driver == nullptr) return absl::UnavailableError("the server is stopping");
    return driver->Cancel(id);
  }

 private:
  InferenceService& service_;
};

}  // namespace

std::unique_ptr<BatchItemBackend> MakeInferenceBackend(InferenceService& service) {
  return std::make_unique<InferenceBackend>(service);
}

struct BatchJobsService::Job {
  uint64_t seq = 0;
  std::string fingerprint;  // deterministic serialization of the request
  std::string idempotency_key;
  v1::GenerateRequest defaults;
  v1::PriorityClass priority = v1::PRIORITY_CLASS_UNSPECIFIED;
  absl::Time expires_at;
  // Guarded by the service's mu_ from here on.
  std::vector<v1::BatchItem> items;  // dropped when the job ends
  v1::BatchJob meta;
  std::vector<v1::BatchItemResult> results;
  bool cancel_requested = false;
  absl::Time ended_at = absl::InfiniteFuture();
};

BatchJobsService::BatchJobsService(BatchItemBackend& backend, BatchJobsOptions options)
    : backend_(backend), options_(options) {
  const int n = std::max(1, options_.max_concurrent_jobs);
  for (int i = 0; i < n; ++i) threads_.emplace_back([this] { JobThread(); });
}

BatchJobsService::~BatchJobsService() { Stop(); }

void BatchJobsService::Stop() {
  {
    absl::MutexLock lock(&mu_);
    if (!stopping_) {
      stopping_ = true;
      for (const std::shared_ptr<Job>& job : queue_) {
        if (!IsTerminal(job->meta.status())) {
          EndUnstarted(*job, v1::BATCH_JOB_STATUS_FAILED, "not run: the server is stopping");
        }
      }
      queue_.clear();
      changed_.SignalAll();
    }
  }
  for (std::thread& t : threads_) {
    if (t.joinable()) t.join();
  }
}

void BatchJobsService::SetStatus(Job& job, v1::BatchJobStatus status) {
  const absl::Time now = absl::Now();
  job.meta.set_status(status);
  switch (status) {
    case v1::BATCH_JOB_STATUS_IN_PROGRESS: SetTime(job.meta.mutable_started_at(), now); break;
    case v1::BATCH_JOB_STATUS_FINALIZING: SetTime(job.meta.mutable_finalizing_at(), now); break;
    case v1::BATCH_JOB_STATUS_COMPLETED: SetTime(job.meta.mutable_completed_at(), now); break;
    case v1::BATCH_JOB_STATUS_FAILED: SetTime(job.meta.mutable_failed_at(), now); break;
    case v1::BATCH_JOB_STATUS_EXPIRED: SetTime(job.meta.mutable_expired_at(), now); break;
    case v1::BATCH_JOB_STATUS_CANCELLING: SetTime(job.meta.mutable_cancelling_at(), now); break;
    case v1::BATCH_JOB_STATUS_CANCELLED: SetTime(job.meta.mutable_cancelled_at(), now); break;
    default: break;
  }
  if (IsTerminal(status)) {
    job.ended_at = now;
    job.items.clear();
    job.items.shrink_to_fit();
  }
  changed_.SignalAll();
}

void BatchJobsService::AddResultLocked(Job& job, v1::BatchEvent::ItemResult result) {
  v1::BatchJobCounts* counts = job.meta.mutable_counts();
  if (result.has_result()) {
    counts->set_completed(counts->completed() + 1);
  } else if (result.error().code() == static_cast<int>(absl::StatusCode::kCancelled)) {
    counts->set_cancelled(counts->cancelled() + 1);
  } else {
    counts->set_failed(counts->failed() + 1);
  }
  v1::BatchItemResult& entry = job.results.emplace_back();
  entry.set_cursor(job.results.size() - 1);
  *entry.mutable_item() = std::move(result);
  job.meta.set_results_cursor_end(job.results.size());
  changed_.SignalAll();
}

void BatchJobsService::AddResult(Job& job, v1::BatchEvent::ItemResult result) {
  absl::MutexLock lock(&mu_);
  AddResultLocked(job, std::move(result));
}

void BatchJobsService::EndUnstarted(Job& job, v1::BatchJobStatus status, const std::string& why) {
  for (size_t i = 0; i < job.items.size(); ++i) {
    AddResultLocked(job, ErrorResult(job.items[i], i, absl::CancelledError(why)));
  }
  SetStatus(job, status);
}

std::shared_ptr<BatchJobsService::Job> BatchJobsService::Find(const std::string& id) {
  auto it = jobs_.find(id);
  return it == jobs_.end() ? nullptr : it->second;
}

void BatchJobsService::ExpireQueued(absl::Time now) {
  for (auto it = queue_.begin(); it != queue_.end();) {
    Job& job = **it;
    if (job.expires_at <= now) {
      EndUnstarted(job, v1::BATCH_JOB_STATUS_EXPIRED, "not run: the job expired");
      it = queue_.erase(it);
    } else {
      ++it;
    }
  }
}

void BatchJobsService::Purge(absl::Time now) {
  ExpireQueued(now);
  for (auto it = by_seq_.begin(); it != by_seq_.end();) {
    std::shared_ptr<Job> job = Find(it->second);
    if (job != nullptr && !(IsTerminal(job->meta.status()) &&
                            job->ended_at + options_.result_ttl <= now)) {
      ++it;
      continue;
    }
    if (job != nullptr) {
      auto key = by_key_.find(job->idempotency_key);
      if (key != by_key_.end() && key->second == it->second) by_key_.erase(key);
      jobs_.erase(it->second);
    }
    it = by_seq_.erase(it);
  }
}

absl::StatusOr<std::vector<v1::BatchItem>> BatchJobsService::LoadItems(
    const v1::CreateBatchJobRequest& request) {
  std::vector<v1::BatchItem> items;
  switch (request.input_case()) {
    case v1::CreateBatchJobRequest::kItems:
      items.assign(request.items().items().begin(), request.items().items().end());
      break;
    case v1::CreateBatchJobRequest::kInputUri: {
      const std::string& uri = request.input_uri();
      if (uri.rfind(kFileScheme, 0) != 0) {
        return absl::InvalidArgumentError(
            "CreateBatchJob: input_uri must be file://<absolute path>");
      }
      const std::string path = uri.substr(sizeof(kFileScheme) - 1);
      if (path.empty() || path[0] != '/') {
        return absl::InvalidArgumentError(
            "CreateBatchJob: input_uri must be file://<absolute path>");
      }
      if (options_.input_root.empty()) {
        return absl::FailedPreconditionError(
            "CreateBatchJob: file inputs are off (the server was started without "
            "--batch_input_root)");
      }
      std::error_code error;
      const std::filesystem::path root =
          std::filesystem::weakly_canonical(options_.input_root, error);
      const std::filesystem::path resolved = std::filesystem::weakly_canonical(path, error);
      if (error) return absl::InvalidArgumentError("CreateBatchJob: cannot resolve input_uri");
      const auto [root_end, unused] =
          std::mismatch(root.begin(), root.end(), resolved.begin(), resolved.end());
      if (root_end != root.end()) {
        return absl::PermissionDeniedError(
            "CreateBatchJob: input_uri is outside the server's --batch_input_root");
      }
      std::ifstream in(resolved, std::ios::binary);
      if (!in) return absl::InvalidArgumentError("CreateBatchJob: cannot read input_uri");
      std::string text;
      char buffer[1 << 16];
      while (in.read(buffer, sizeof(buffer)) || in.gcount() > 0) {
        text.append(buffer, static_cast<size_t>(in.gcount()));
        if (text.size() > kMaxInputFileBytes) {
          return absl::InvalidArgumentError(absl::StrCat(
              "CreateBatchJob: the input file is larger than ", kMaxInputFileBytes, " bytes"));
        }
      }
      if (in.bad()) return absl::InvalidArgumentError("CreateBatchJob: cannot read input_uri");
      absl::StatusOr<v1::GenerateBatchRequest> parsed = ParseBatchJsonl(text);
      if (!parsed.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("CreateBatchJob: input file: ", parsed.status().message()));
      }
      items.assign(parsed->items().begin(), parsed->items().end());
      break;
    }
    default:
      return absl::InvalidArgumentError("CreateBatchJob: give items or input_uri");
  }
  if (absl::Status s = CheckItems(items, backend_.max_batch_items()); !s.ok()) return s;
  return items;
}

grpc::Status BatchJobsService::CreateBatchJob(grpc::ServerContext*,
                                              const v1::CreateBatchJobRequest* request,
                                              v1::BatchJob* response) {
  if (absl::Status ready = backend_.Ready(); !ready.ok()) return ToGrpc(ready);
  absl::Duration window = options_.default_completion_window;
  if (request->has_completion_window()) {
    window = absl::Seconds(request->completion_window().seconds()) +
             absl::Nanoseconds(request->completion_window().nanos());
    if (window < absl::Seconds(1) || window > absl::Hours(24 * 7)) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          "CreateBatchJob: completion_window must be 1 s .. 7 days");
    }
  }
  if (request->labels_size() > kMaxLabels) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        absl::StrCat("CreateBatchJob: at most ", kMaxLabels, " labels"));
  }
  for (const auto& [key, value] : request->labels()) {
    if (key.empty() || key.size() > 64 || value.size() > 512) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          "CreateBatchJob: label keys must be 1..64 bytes, values <= 512");
    }
  }
  if (request->idempotency_key().size() > 256) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "CreateBatchJob: idempotency_key must be <= 256 bytes");
  }
  absl::StatusOr<std::vector<v1::BatchItem>> items = LoadItems(*request);
  if (!items.ok()) return ToGrpc(items.status());

  std::string fingerprint;
  {
    google::protobuf::io::StringOutputStream stream(&fingerprint);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    request->SerializeToCodedStream(&coded);
  }
  const absl::Time now = absl::Now();
  absl::MutexLock lock(&mu_);
  if (stopping_) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the server is stopping");
  Purge(now);
  if (!request->idempotency_key().empty()) {
    auto it = by_key_.find(request->idempotency_key());
    if (it != by_key_.end()) {
      std::shared_ptr<Job> existing = Find(it->second);
      if (existing != nullptr) {
        if (existing->fingerprint != fingerprint) {
          return grpc::Status(grpc::StatusCode::ALREADY_EXISTS,
                              "CreateBatchJob: idempotency_key was used for a different job " +
                                  existing->meta.id());
        }
        *response = existing->meta;
        return grpc::Status::OK;
      }
    }
  }
  auto job = std::make_shared<Job>();
  job->seq = next_seq_++;
  job->fingerprint = std::move(fingerprint);
  job->idempotency_key = request->idempotency_key();
  job->defaults = request->defaults();
  job->priority = request->priority_class();
  job->expires_at = now + window;
  job->items = std::move(*items);
  std::string id = NewJobId();
  while (jobs_.contains(id)) id = NewJobId();
  job->meta.set_id(id);
  SetTime(job->meta.mutable_created_at(), now);
  SetTime(job->meta.mutable_expires_at(), job->expires_at);
  SetDuration(job->meta.mutable_completion_window(), window);
  SetDuration(job->meta.mutable_result_ttl(), options_.result_ttl);
  job->meta.mutable_labels()->insert(request->labels().begin(), request->labels().end());
  job->meta.mutable_counts()->set_total(static_cast<uint32_t>(job->items.size()));
  // Validation above is synchronous; the job is queued as soon as it exists.
  job->meta.set_status(v1::BATCH_JOB_STATUS_VALIDATING);
  SetStatus(*job, v1::BATCH_JOB_STATUS_QUEUED);
  jobs_[id] = job;
  by_seq_[job->seq] = id;
  if (!job->idempotency_key.empty()) by_key_[job->idempotency_key] = id;
  queue_.push_back(job);
  changed_.SignalAll();
  *response = job->meta;
  return grpc::Status::OK;
}

grpc::Status BatchJobsService::GetBatchJob(grpc::ServerContext*,
                                           const v1::GetBatchJobRequest* request,
                                           v1::BatchJob* response) {
  absl::MutexLock lock(&mu_);
  Purge(absl::Now());
  std::shared_ptr<Job> job = Find(request->id());
  if (job == nullptr) {
    return grpc::Status(grpc::StatusCode::NOT_FOUND, "no batch job \"" + request->id() + "\"");
  }
  *response = job->meta;
  return grpc::Status::OK;
}

grpc::Status BatchJobsService::ListBatchJobs(grpc::ServerContext*,
                                             const v1::ListBatchJobsRequest* request,
                                             v1::ListBatchJobsResponse* response) {
  int page_size = static_cast<int>(std::min<uint32_t>(request->page_size(), kMaxPageSize));
  if (page_size == 0) page_size = kDefaultPageSize;
  uint64_t before = UINT64_MAX;
  if (!request->page_token().empty()) {
    const std::string& token = request->page_token();
    if (token[0] != 'p' || !absl::SimpleAtoi(absl::string_view(token.data() + 1, token.size() - 1),
                                             &before)) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "ListBatchJobs: bad page_token");
    }
  }
  absl::MutexLock lock(&mu_);
  Purge(absl::Now());
  auto it = by_seq_.lower_bound(before);  // first not listed
  while (it != by_seq_.begin()) {
    --it;
    if (response->jobs_size() == page_size) {
      response->set_next_page_token(absl::StrCat("p", std::next(it)->first));
      break;
    }
    if (std::shared_ptr<Job> job = Find(it->second); job != nullptr) {
      *response->add_jobs() = job->meta;
    }
  }
  return grpc::Status::OK;
}

grpc::Status BatchJobsService::CancelBatchJob(grpc::ServerContext*,
                                              const v1::CancelBatchJobRequest* request,
                                              v1::BatchJob* response) {
  absl::MutexLock lock(&mu_);
  Purge(absl::Now());
  std::shared_ptr<Job> job = Find(request->id());
  if (job == nullptr) {
    return grpc::Status(grpc::StatusCode::NOT_FOUND, "no batch job \"" + request->id() + "\"");
  }
  const v1::BatchJobStatus status = job->meta.status();
  if (status == v1::BATCH_JOB_STATUS_QUEUED) {
    for (auto it = queue_.begin(); it != queue_.end(); ++it) {
      if (it->get() == job.get()) {
        queue_.erase(it);
        break;
      }
    }
    SetStatus(*job, v1::BATCH_JOB_STATUS_CANCELLING);
    EndUnstarted(*job, v1::BATCH_JOB_STATUS_CANCELLED, "cancelled with the job");
  } else if (!IsTerminal(status)) {
    job->cancel_requested = true;
    if (status != v1::BATCH_JOB_STATUS_CANCELLING) {
      SetStatus(*job, v1::BATCH_JOB_STATUS_CANCELLING);
    }
  }
  *response = job->meta;
  return grpc::Status::OK;
}

absl::Status BatchJobsService::ReadResults(const std::string& job_id, uint64_t cursor,
                                           bool include_successes, bool include_errors,
                                           size_t max, std::vector<v1::BatchItemResult>& out,
                                           uint64_t& next, bool& finished) {
  if (!include_successes && !include_errors) include_successes = include_errors = true;
  absl::MutexLock lock(&mu_);
  std::shared_ptr<Job> job = Find(job_id);
  if (job == nullptr) return absl::NotFoundError("no batch job \"" + job_id + "\"");
  const bool terminal = IsTerminal(job->meta.status());
  const uint64_t end = job->results.size();
  if (cursor > end && terminal) {
    return absl::OutOfRangeError(
        absl::StrCat("ReadBatchResults: cursor ", cursor, " is past the end (", end, ")"));
  }
  next = cursor;
  while (next < end && next - cursor < max) {
    const v1::BatchItemResult& entry = job->results[next++];
    if (entry.item().has_result() ? include_successes : include_errors) out.push_back(entry);
  }
  finished = terminal && next >= end;
  return absl::OkStatus();
}

void BatchJobsService::WaitForResults(const std::string& job_id, uint64_t cursor,
                                      absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    std::shared_ptr<Job> job = Find(job_id);
    if (job == nullptr || job->results.size() > cursor || IsTerminal(job->meta.status())) return;
    changed_.WaitWithDeadline(&mu_, deadline);
  }
}

grpc::Status BatchJobsService::ReadBatchResults(grpc::ServerContext* context,
                                                const v1::ReadBatchResultsRequest* request,
                                                grpc::ServerWriter<v1::BatchItemResult>* writer) {
  uint64_t cursor = request->cursor();
  while (true) {
    std::vector<v1::BatchItemResult> batch;
    uint64_t next = cursor;
    bool finished = false;
    absl::Status s = ReadResults(request->job_id(), cursor, request->include_successes(),
                                 request->include_errors(), 256, batch, next, finished);
    if (!s.ok()) return ToGrpc(s);
    for (const v1::BatchItemResult& entry : batch) {
      if (!writer->Write(entry)) {
        return grpc::Status(grpc::StatusCode::CANCELLED, "the client went away");
      }
    }
    if (finished) return grpc::Status::OK;
    if (context->IsCancelled()) {
      return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled by the client");
    }
    if (next == cursor) WaitForResults(request->job_id(), cursor, absl::Milliseconds(200));
    cursor = next;
  }
}

void BatchJobsService::JobThread() {
  while (true) {
    std::shared_ptr<Job> job;
    {
      absl::MutexLock lock(&mu_);
      while (!stopping_ && queue_.empty()) changed_.Wait(&mu_);
      if (stopping_) return;
      job = queue_.front();
      queue_.pop_front();
    }
    RunJob(*job);
  }
}

void BatchJobsService::RunJob(Job& job) {
  std::vector<v1::BatchItem> inputs;
  {
    absl::MutexLock lock(&mu_);
    if (IsTerminal(job.meta.status())) return;
    if (job.expires_at <= absl::Now()) {
      EndUnstarted(job, v1::BATCH_JOB_STATUS_EXPIRED, "not run: the job expired");
      return;
    }
    if (absl::Status ready = backend_.Ready(); !ready.ok()) {
      SetError(job.meta.add_job_errors(), ready);
      EndUnstarted(job, v1::BATCH_JOB_STATUS_FAILED, "not run: the server is not ready");
      return;
    }
    inputs = job.items;  // the job thread's own copy; job.items is guarded
    SetStatus(job, v1::BATCH_JOB_STATUS_IN_PROGRESS);
  }
  const int n = static_cast<int>(inputs.size());
  const int cap = std::max(1, job.priority == v1::PRIORITY_CLASS_INTERACTIVE
                                  ? options_.interactive_max_in_flight
                                  : options_.batch_max_in_flight);
  struct Item {
    std::optional<SampleSet> samples;
    bool running = false;  // some of its samples are in the step loop
    bool done = false;
  };
  std::vector<Item> items(n);
  auto queue = std::make_shared<SeqEventQueue>();
  int next = 0;
  int in_flight = 0;
  bool stopping = false;
  v1::BatchJobStatus final_status = v1::BATCH_JOB_STATUS_COMPLETED;
  std::string stop_reason;
  absl::Status job_error;
  absl::Time stop_deadline = absl::InfiniteFuture();
  absl::Time retry_at = absl::InfinitePast();

  auto cancel_seq = [&](RequestId id) { backend_.Cancel(id).IgnoreError(); };
  auto finish = [&](int index, v1::BatchEvent::ItemResult result) {
    Item& item = items[index];
    if (item.running) in_flight -= static_cast<int>(item.samples->size());
    item.running = false;
    item.done = true;
    item.samples.reset();
    AddResult(job, std::move(result));
  };
  auto begin_stop = [&](v1::BatchJobStatus status, std::string reason) {
    if (stopping) return;
    stopping = true;
    final_status = status;
    stop_reason = std::move(reason);
    stop_deadline = absl::Now() + options_.cancel_grace;
    for (Item& item : items) {
      if (item.running) item.samples->CancelRunning(cancel_seq);
    }
  };

  while (true) {
    const absl::Time now = absl::Now();
    bool cancel = false;
    bool server_stopping = false;
    {
      absl::MutexLock lock(&mu_);
      cancel = job.cancel_requested;
      server_stopping = stopping_;
    }
    if (cancel) begin_stop(v1::BATCH_JOB_STATUS_CANCELLED, "cancelled with the job");
    if (server_stopping) {
      job_error = absl::UnavailableError("the server is stopping");
      begin_stop(v1::BATCH_JOB_STATUS_FAILED, "not finished: the server is stopping");
    }
    if (now >= job.expires_at) {
      begin_stop(v1::BATCH_JOB_STATUS_EXPIRED, "not finished: the job expired");
    }
    // An item of n samples takes n of the `cap` in-flight sequences (one
    // item always fits an empty window). A sample the step loop refuses for
    // now (RESOURCE_EXHAUSTED) is retried later, its item's earlier samples
    // running meanwhile.
    while (!stopping && now >= retry_at && next < n) {
      const int index = next;
      Item& item = items[index];
      if (!item.samples.has_value()) {
        if (in_flight >= cap) break;
        const v1::GenerateRequest merged = MergeItem(job.defaults, inputs[index].request());
        absl::StatusOr<BuiltRequest> built = backend_.Build(merged);
        if (!built.ok()) {
          ++next;
          finish(index, ErrorResult(inputs[index], index, built.status()));
          continue;
        }
        const int sequences = static_cast<int>(std::max<uint32_t>(built->num_samples, 1));
        if (in_flight > 0 && in_flight + sequences > cap) break;
        item.samples.emplace(std::move(*built), backend_.tokenizer(), absl::Now());
        item.running = true;
        in_flight += sequences;
      }
      const absl::Status submitted = item.samples->SubmitRest(
          [&] { return backend_.NextId(); },
          [&](std::vector<SeqSubmission> group) { return backend_.SubmitGroup(std::move(group)); },
          queue, EventIndex(index, 0));
      if (submitted.ok()) {
        ++next;
        continue;
      }
      if (submitted.code() == absl::StatusCode::kResourceExhausted) {
        retry_at = now + absl::Milliseconds(100);  // the step loop is full: later
        if (item.samples->submitted() == 0) {  // nothing of it runs: start it afresh later
          in_flight -= static_cast<int>(item.samples->size());
          item.samples.reset();
          item.running = false;
        }
        break;
      }
      item.samples->Abandon(cancel_seq);
      if (submitted.code() == absl::StatusCode::kUnavailable) {
        job_error = submitted;
        begin_stop(v1::BATCH_JOB_STATUS_FAILED, "not run: the server is unavailable");
        break;
      }
      ++next;
      finish(index, ErrorResult(inputs[index], index, submitted));
    }
    if (in_flight == 0 && (stopping || next == n)) break;
    if (stopping && now > stop_deadline) break;

    auto event = queue->Pop(absl::Milliseconds(50));
    if (!event.has_value()) continue;
    const auto [item_index, sample] = SplitEventIndex(event->first);
    const int index = static_cast<int>(item_index);
    if (index >= n) continue;
    Item& item = items[index];
    if (!item.running) continue;  // an event after the item ended
    SampleSet::Update update = item.samples->Apply(sample, event->second);
    if (update.cancel_in_driver) cancel_seq(update.id);
    if (!update.error.ok()) {
      // One sample failing fails the item: the others stop too.
      item.samples->Abandon(cancel_seq);
      absl::Status error = update.error;
      if (stopping && error.code() == absl::StatusCode::kCancelled) {
        error = absl::CancelledError(stop_reason);
      }
      finish(index, ErrorResult(inputs[index], index, error));
      continue;
    }
    if (!update.done) {
      // Stopping with samples never submitted: the item ends when the
      // submitted ones have.
      if (stopping && item.samples->running() == 0) {
        finish(index, ErrorResult(inputs[index], index, absl::CancelledError(stop_reason)));
      }
      continue;
    }
    if (item.samples->ItemReason() == v1::FINISH_REASON_CANCELLED) {
      finish(index, ErrorResult(inputs[index], index,
                                absl::CancelledError(stopping ? stop_reason : "cancelled")));
      continue;
    }
    v1::BatchEvent::ItemResult result;
    result.set_custom_id(inputs[index].custom_id());
    result.set_index(index);
    *result.mutable_result() = item.samples->Result();
    finish(index, std::move(result));
  }
  // Items that never finished: cancelled (abandoned after the grace period
  // if the step loop did not acknowledge their cancellation).
  for (int i = 0; i < n; ++i) {
    if (items[i].done) continue;
    if (items[i].running) items[i].samples->Abandon(cancel_seq);
    finish(i, ErrorResult(inputs[i], i,
                          absl::CancelledError(stop_reason.empty() ? "not run" : stop_reason)));
  }
  absl::MutexLock lock(&mu_);
  if (final_status == v1::BATCH_JOB_STATUS_COMPLETED && job.cancel_requested) {
    final_status = v1::BATCH_JOB_STATUS_CANCELLED;
  }
  if (!job_error.ok()) SetError(job.meta.add_job_errors(), job_error);
  if (final_status == v1::BATCH_JOB_STATUS_COMPLETED) {
    SetStatus(job, v1::BATCH_JOB_STATUS_FINALIZING);
  }
  SetStatus(job, final_status);
}

}  // namespace weir::coordinator
