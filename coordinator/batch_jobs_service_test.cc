#include "coordinator/batch_jobs_service.h"

#include <cstdlib>
#include <fstream>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace weir::coordinator {
namespace {

// Items whose first prompt token is kLong run until cancelled; kSeeded ones
// finish at once with tokens kSeeded+1, seed % 1000 (the sample's seed); the
// others finish at once with tokens prompt[0]+1, prompt[0]+2.
constexpr uint32_t kLong = 7;
constexpr uint32_t kSeeded = 9;

class FakeBackend final : public BatchItemBackend {
 public:
  absl::Status Ready() const override {
    return ready_ ? absl::OkStatus() : absl::UnavailableError("not ready");
  }
  uint32_t max_batch_items() const override { return 100; }
  absl::StatusOr<BuiltRequest> Build(const v1::GenerateRequest& request) override {
    RequestLimits limits;
    limits.vocab_size = 1000;
    limits.max_context_tokens = 4096;
    limits.default_max_new_tokens = 2;
    limits.max_num_samples = 16;
    return BuildRequest(request, limits, nullptr, 1);
  }
  const tokenizer::Tokenizer* tokenizer() const override { return nullptr; }
  RequestId NextId() override { return RequestId(next_id_++); }
  // A group is refused or taken whole, as StepDriver::SubmitGroup.
  absl::Status SubmitGroup(std::vector<SeqSubmission> group) override {
    {
      absl::MutexLock lock(&mu_);
      if (exhausted_ > 0 || submit_calls_++ == refuse_call_) {
        exhausted_ = std::max(exhausted_ - 1, 0);
        return absl::ResourceExhaustedError("full");
      }
      group_sizes_.push_back(group.size());
    }
    for (SeqSubmission& submission : group) Take(std::move(submission));
    return absl::OkStatus();
  }
  std::vector<size_t> group_sizes() {
    absl::MutexLock lock(&mu_);
    return group_sizes_;
  }
  void Take(SeqSubmission submission) {
    absl::MutexLock lock(&mu_);
    const scheduler::SeqRequest& request = submission.request;
    submitted_.push_back({request.id, submission.seed, request.fork_of});
    if (request.prompt[0] == kLong) {
      held_[request.id] = submission.sink;
      max_held_ = std::max<int>(max_held_, held_.size());
      return;
    }
    SeqEvent event;
    event.tokens = {request.prompt[0] + 1, request.prompt[0] + 2};
    if (request.prompt[0] == kSeeded) event.tokens[1] = submission.seed % 1000;
    event.finish = scheduler::FinishReason::kMaxTokens;
    submission.sink(event);
    return;
  }
  absl::Status Cancel(RequestId id) override {
    absl::MutexLock lock(&mu_);
    auto it = held_.find(id);
    if (it == held_.end()) return absl::NotFoundError("not live");
    SeqEvent event;
    event.finish = scheduler::FinishReason::kCancelled;
    it->second(event);
    held_.erase(it);
    return absl::OkStatus();
  }
  int held() {
    absl::MutexLock lock(&mu_);
    return held_.size();
  }
  int max_held() {
    absl::MutexLock lock(&mu_);
    return max_held_;
  }
  void set_exhausted(int n) {
    absl::MutexLock lock(&mu_);
    exhausted_ = n;
  }
  // Refuses the `k`-th SubmitGroup call from now on (0-based) once.
  void refuse_call(int k) {
    absl::MutexLock lock(&mu_);
    refuse_call_ = submit_calls_ + k;
  }
  struct Submitted {
    RequestId id;
    uint64_t seed = 0;
    std::optional<RequestId> fork_of;
  };
  std::vector<Submitted> submitted() {
    absl::MutexLock lock(&mu_);
    return submitted_;
  }
  std::atomic<bool> ready_{true};

 private:
  std::atomic<uint64_t> next_id_{1};
  absl::Mutex mu_;
  absl::flat_hash_map<RequestId, std::function<void(const SeqEvent&)>> held_;
  int max_held_ = 0;
  int exhausted_ = 0;
  int submit_calls_ = 0;
  int refuse_call_ = -1;
  std::vector<Submitted> submitted_;
  std::vector<size_t> group_sizes_;
};

v1::CreateBatchJobRequest Request(const std::vector<uint32_t>& first_tokens) {
  v1::CreateBatchJobRequest request;
  for (size_t i = 0; i < first_tokens.size(); ++i) {
    v1::BatchItem* item = request.mutable_items()->add_items();
    item->set_custom_id(absl::StrCat("item-", i));
    item->mutable_request()->mutable_tokens()->add_ids(first_tokens[i]);
    item->mutable_request()->mutable_tokens()->add_ids(3);
  }
  return request;
}

v1::BatchJob Create(BatchJobsService& service, const v1::CreateBatchJobRequest& request) {
  grpc::ServerContext context;
  v1::BatchJob job;
  grpc::Status s = service.CreateBatchJob(&context, &request, &job);
  EXPECT_TRUE(s.ok()) << s.error_message();
  return job;
}

grpc::StatusCode CreateCode(BatchJobsService& service, const v1::CreateBatchJobRequest& request) {
  grpc::ServerContext context;
  v1::BatchJob job;
  return service.CreateBatchJob(&context, &request, &job).error_code();
}

v1::BatchJob Get(BatchJobsService& service, const std::string& id) {
  grpc::ServerContext context;
  v1::GetBatchJobRequest request;
  request.set_id(id);
  v1::BatchJob job;
  EXPECT_TRUE(service.GetBatchJob(&context, &request, &job).ok());
  return job;
}

v1::BatchJob WaitFor(BatchJobsService& service, const std::string& id,
                     std::function<bool(const v1::BatchJob&)> done) {
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  v1::BatchJob job;
  do {
    job = Get(service, id);
    if (done(job)) return job;
    absl::SleepFor(absl::Milliseconds(5));
  } while (absl::Now() < deadline);
  ADD_FAILURE() << "timed out; status " << v1::BatchJobStatus_Name(job.status());
  return job;
}

v1::BatchJob WaitStatus(BatchJobsService& service, const std::string& id,
                        v1::BatchJobStatus status) {
  return WaitFor(service, id, [status](const v1::BatchJob& j) { return j.status() == status; });
}

std::vector<v1::BatchItemResult> ReadAll(BatchJobsService& service, const std::string& id,
                                         uint64_t cursor = 0, bool successes = true,
                                         bool errors = true) {
  std::vector<v1::BatchItemResult> out;
  uint64_t next = cursor;
  bool finished = false;
  EXPECT_TRUE(service.ReadResults(id, cursor, successes, errors, 1000, out, next, finished).ok());
  EXPECT_TRUE(finished);
  return out;
}

TEST(BatchJobsServiceTest, RunsItemsAndRecordsPerItemFailures) {
  FakeBackend backend;
  BatchJobsService service(backend, BatchJobsOptions{});
  v1::CreateBatchJobRequest request = Request({10, 20, 5000, 30});  // 5000 >= vocab
  request.mutable_defaults()->mutable_stop()->set_max_new_tokens(2);
  (*request.mutable_labels())["team"] = "search";
  const v1::BatchJob created = Create(service, request);
  EXPECT_EQ(created.counts().total(), 4u);
  EXPECT_TRUE(created.has_created_at());
  EXPECT_EQ(created.labels().at("team"), "search");
  EXPECT_EQ(created.completion_window().seconds(), 24 * 3600);
  EXPECT_GT(created.expires_at().seconds(), created.created_at().seconds());

  const v1::BatchJob job = WaitStatus(service, created.id(), v1::BATCH_JOB_STATUS_COMPLETED);
  EXPECT_EQ(job.counts().completed(), 3u);
  EXPECT_EQ(job.counts().failed(), 1u);
  EXPECT_EQ(job.counts().cancelled(), 0u);
  EXPECT_EQ(job.results_cursor_end(), 4u);
  EXPECT_TRUE(job.has_started_at());
  EXPECT_TRUE(job.has_finalizing_at());
  EXPECT_TRUE(job.has_completed_at());
  EXPECT_FALSE(job.has_cancelled_at());

  const std::vector<v1::BatchItemResult> results = ReadAll(service, created.id());
  ASSERT_EQ(results.size(), 4u);
  std::set<std::string> ids;
  for (size_t i = 0; i < results.size(); ++i) {
    EXPECT_EQ(results[i].cursor(), i);
    const auto& item = results[i].item();
    ids.insert(item.custom_id());
    if (item.custom_id() == "item-2") {
      EXPECT_EQ(item.error().code(), static_cast<int>(absl::StatusCode::kInvalidArgument));
    } else {
      ASSERT_TRUE(item.has_result()) << item.error().message();
      const uint32_t first = std::vector<uint32_t>{10, 20, 5000, 30}[item.index()];
      ASSERT_EQ(item.result().samples(0).full_token_ids_size(), 2);
      EXPECT_EQ(item.result().samples(0).full_token_ids(0), first + 1);
    }
  }
  EXPECT_EQ(ids.size(), 4u);
  EXPECT_EQ(ReadAll(service, created.id(), 0, true, false).size(), 3u);
  EXPECT_EQ(ReadAll(service, created.id(), 0, false, true).size(), 1u);
}

// Token ids of each sample of a successful result, by sample index.
std::vector<std::vector<uint32_t>> SampleTokens(const v1::BatchEvent::ItemResult& item) {
  std::vector<std::vector<uint32_t>> out;
  for (const v1::GenerateEvent::Final& sample : item.result().samples()) {
    EXPECT_EQ(sample.sample_index(), out.size());
    out.emplace_back(sample.full_token_ids().begin(), sample.full_token_ids().end());
  }
  return out;
}

TEST(BatchJobsServiceTest, AnItemWithSamplesHasOneResultWithEverySample) {
  FakeBackend backend;
  BatchJobsOptions options;
  options.batch_max_in_flight = 2;  // fewer than the item's samples: it still runs
  BatchJobsService service(backend, options);
  v1::CreateBatchJobRequest request = Request({kSeeded, kSeeded, kSeeded, kSeeded});
  v1::GenerateRequest* three = request.mutable_items()->mutable_items(0)->mutable_request();
  three->mutable_sampling()->set_seed(500);
  three->mutable_sampling()->set_num_samples(3);
  for (int i = 1; i <= 3; ++i) {  // the one-sample items sample 0, 1, 2 must equal
    request.mutable_items()->mutable_items(i)->mutable_request()->mutable_sampling()->set_seed(
        499 + i);
  }
  const v1::BatchJob created = Create(service, request);
  WaitStatus(service, created.id(), v1::BATCH_JOB_STATUS_COMPLETED);
  std::vector<std::vector<std::vector<uint32_t>>> by_index(4);
  std::string server_id;
  for (const v1::BatchItemResult& r : ReadAll(service, created.id())) {
    ASSERT_TRUE(r.item().has_result()) << r.item().error().message();
    by_index[r.item().index()] = SampleTokens(r.item());
    if (r.item().index() == 0) server_id = r.item().result().accepted().server_request_id();
  }
  ASSERT_EQ(by_index[0].size(), 3u);
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(by_index[i + 1].size(), 1u);
    EXPECT_EQ(by_index[0][i], by_index[i + 1][0]) << "sample " << i;
    EXPECT_EQ(by_index[0][i], (std::vector<uint32_t>{kSeeded + 1, 500u + i}));
  }
  // Samples 1 and 2 fork sample 0; the result names sample 0's server id.
  const std::vector<FakeBackend::Submitted> submitted = backend.submitted();
  ASSERT_GE(submitted.size(), 3u);
  EXPECT_EQ(server_id, absl::StrCat("weir-", submitted[0].id.value()));
  EXPECT_FALSE(submitted[0].fork_of.has_value());
  EXPECT_EQ(submitted[1].fork_of, submitted[0].id);
  EXPECT_EQ(submitted[2].fork_of, submitted[0].id);
  EXPECT_EQ(Get(service, created.id()).counts().completed(), 4u);
}

TEST(BatchJobsServiceTest, ASampleRefusedByAFullLoopIsRetried) {
  FakeBackend backend;
  BatchJobsService service(backend, BatchJobsOptions{});
  v1::CreateBatchJobRequest request = Request({kSeeded});
  request.mutable_items()->mutable_items(0)->mutable_request()->mutable_sampling()->set_seed(7);
  request.mutable_items()->mutable_items(0)->mutable_request()->mutable_sampling()->set_num_samples(3);
  backend.refuse_call(0);  // the item's first try: none of its samples runs
  const v1::BatchJob created = Create(service, request);
  WaitStatus(service, created.id(), v1::BATCH_JOB_STATUS_COMPLETED);
  const std::vector<v1::BatchItemResult> results = ReadAll(service, created.id());
  ASSERT_EQ(results.size(), 1u);
  ASSERT_TRUE(results[0].item().has_result()) << results[0].item().error().message();
  const std::vector<std::vector<uint32_t>> samples = SampleTokens(results[0].item());
  ASSERT_EQ(samples.size(), 3u);
  for (uint32_t i = 0; i < 3; ++i) EXPECT_EQ(samples[i][1], 7u + i);
  EXPECT_EQ(backend.submitted().size(), 3u);                 // the refused try ran nothing
  EXPECT_EQ(backend.group_sizes(), std::vector<size_t>{3});  // one group: 1 and 2 fork 0
}

TEST(BatchJobsServiceTest, CancellingAJobEndsItemsWithRunningSamples) {
  FakeBackend backend;
  BatchJobsService service(backend, BatchJobsOptions{});
  v1::CreateBatchJobRequest request = Request({kLong});
  request.mutable_items()->mutable_items(0)->mutable_request()->mutable_sampling()->set_num_samples(4);
  const v1::BatchJob created = Create(service, request);
  WaitFor(service, created.id(), [&](const v1::BatchJob&) { return backend.held() == 4; });
  grpc::ServerContext context;
  v1::CancelBatchJobRequest cancel;
  cancel.set_id(created.id());
  v1::BatchJob response;
  ASSERT_TRUE(service.CancelBatchJob(&context, &cancel, &response).ok());
  const absl::Time start = absl::Now();
  const v1::BatchJob job = WaitStatus(service, created.id(), v1::BATCH_JOB_STATUS_CANCELLED);
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));  // not the cancel grace
  EXPECT_EQ(job.counts().cancelled(), 1u);
  EXPECT_EQ(backend.held(), 0);
}

TEST(BatchJobsServiceTest, ResumingAtACursorHasNoGapsOrDuplicates) {
  FakeBackend backend;
  BatchJobsService service(backend, BatchJobsOptions{});
  const v1::BatchJob created = Create(service, Request({1, 2, 3, 4, 5, 6, 7000}));
  WaitStatus(service, created.id(), v1::BATCH_JOB_STATUS_COMPLETED);
  const std::vector<v1::BatchItemResult> all = ReadAll(service, created.id());
  ASSERT_EQ(all.size(), 7u);
  std::vector<v1::BatchItemResult> parts;
  uint64_t cursor = 0;
  bool finished = false;
  while (!finished) {
    std::vector<v1::BatchItemResult> part;
    uint64_t next = 0;
    ASSERT_TRUE(service.ReadResults(created.id(), cursor, true, true, 3, part, next, finished).ok());
    ASSERT_LE(part.size(), 3u);
    parts.insert(parts.end(), part.begin(), part.end());
    cursor = part.back().cursor() + 1;  // as a reconnecting client would
  }
  ASSERT_EQ(parts.size(), all.size());
  for (size_t i = 0; i < all.size(); ++i) EXPECT_EQ(parts[i].item().custom_id(), all[i].item().custom_id());

  std::vector<v1::BatchItemResult> out;
  uint64_t next = 0;
  EXPECT_EQ(service.ReadResults(created.id(), 8, true, true, 10, out, next, finished).code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_EQ(service.ReadResults("batch_nope", 0, true, true, 10, out, next, finished).code(),
            absl::StatusCode::kNotFound);
}

TEST(BatchJobsServiceTest, ValidationRejectsTheWholeJob) {
  FakeBackend backend;
  BatchJobsService service(backend, BatchJobsOptions{});
  v1::CreateBatchJobRequest duplicate = Request({1, 2});
  duplicate.mutable_items()->mutable_items(1)->set_custom_id("item-0");
  EXPECT_EQ(CreateCode(service, duplicate), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(CreateCode(service, v1::CreateBatchJobRequest()), grpc::StatusCode::INVALID_ARGUMENT);
  v1::CreateBatchJobRequest empty;
  empty.mutable_items();
  EXPECT_EQ(CreateCode(service, empty), grpc::StatusCode::INVALID_ARGUMENT);
  v1::CreateBatchJobRequest too_many = Request(std::vector<uint32_t>(101, 1));
  for (int i = 0; i < 101; ++i) {
    too_many.mutable_items()->mutable_items(i)->set_custom_id(absl::StrCat("i", i));
  }
  EXPECT_EQ(CreateCode(service, too_many), grpc::StatusCode::INVALID_ARGUMENT);
  v1::CreateBatchJobRequest window = Request({1});
  window.mutable_completion_window()->set_seconds(0);
  EXPECT_EQ(CreateCode(service, window), grpc::StatusCode::INVALID_ARGUMENT);
  v1::CreateBatchJobRequest uri;
  uri.set_input_uri("https://example.com/x.jsonl");
  EXPECT_EQ(CreateCode(service, uri), grpc::StatusCode::INVALID_ARGUMENT);
  uri.set_input_uri("file://relative/path.jsonl");
  EXPECT_EQ(CreateCode(service, uri), grpc::StatusCode::INVALID_ARGUMENT);
  // File inputs are off unless the server names a directory for them.
  uri.set_input_uri("file:///nonexistent/dir/input.jsonl");
  EXPECT_EQ(CreateCode(service, uri), grpc::StatusCode::FAILED_PRECONDITION);
  v1::CreateBatchJobRequest label = Request({1});
  (*label.mutable_labels())[""] = "x";
  EXPECT_EQ(CreateCode(service, label), grpc::StatusCode::INVALID_ARGUMENT);

  backend.ready_ = false;
  EXPECT_EQ(CreateCode(service, Request({1})), grpc::StatusCode::UNAVAILABLE);
}

TEST(BatchJobsServiceTest, ReadsAJsonLinesFile) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string path = std::string(tmp != nullptr ? tmp : "/tmp") + "/batch_input.jsonl";
  std::ofstream(path) << "{\"custom_id\": \"a\", \"tokens\": [11, 3]}\n"
                      << "{\"custom_id\": \"b\", \"tokens\": [12, 3], \"max_new_tokens\": 2}\n";
  FakeBackend backend;
  BatchJobsService service(backend,
                           BatchJobsOptions{.input_root = tmp != nullptr ? tmp : "/tmp"});
  v1::CreateBatchJobRequest request;
  request.set_input_uri("file://" + path);
  const v1::BatchJob created = Create(service, request);
  EXPECT_EQ(created.counts().total(), 2u);
  const v1::BatchJob job = WaitStatus(service, created.id(), v1::BATCH_JOB_STATUS_COMPLETED);
  EXPECT_EQ(job.counts().completed(), 2u);

  std::ofstream(path) << "{not json\n";
  EXPECT_EQ(CreateCode(service, request), grpc::StatusCode::INVALID_ARGUMENT);
  // Nothing outside the input root, ".." included.
  v1::CreateBatchJobRequest outside;
  outside.set_input_uri("file:///etc/passwd");
  EXPECT_EQ(CreateCode(service, outside), grpc::StatusCode::PERMISSION_DENIED);
  outside.set_input_uri("file://" + path + "/../../batch_input.jsonl");
  EXPECT_EQ(CreateCode(service, outside), grpc::StatusCode::PERMISSION_DENIED);
  v1::CreateBatchJobRequest missing;
  missing.set_input_uri("file://" + std::string(tmp != nullptr ? tmp : "/tmp") + "/absent.jsonl");
  EXPECT_EQ(CreateCode(service, missing), grpc::StatusCode::INVALID_ARGUMENT);
}

TEST(BatchJobsServiceTest, IdempotencyKeyReturnsTheSameJob) {
  FakeBackend backend;
  BatchJobsService service(backend, BatchJobsOptions{});
  v1::CreateBatchJobRequest request = Request({1, 2});
  request.set_idempotency_key("k1");
  const v1::BatchJob first = Create(service, request);
  const v1::BatchJob again = Create(service, request);
  EXPECT_EQ(first.id(), again.id());
  v1::CreateBatchJobRequest different = Request({1, 3});
  different.set_idempotency_key("k1");
  EXPECT_EQ(CreateCode(service, different), grpc::StatusCode::ALREADY_EXISTS);
  different.set_idempotency_key("k2");
  EXPECT_NE(Create(service, different).id(), first.id());
}

TEST(BatchJobsServiceTest, CancelStopsInFlightItemsAndKeepsFinishedResults) {
  FakeBackend backend;
  BatchJobsService service(backend, BatchJobsOptions{.batch_max_in_flight = 2});
  // Two quick items, then four that run until cancelled.
  const v1::BatchJob created = Create(service, Request({1, 2, kLong, kLong, kLong, kLong}));
  WaitFor(service, created.id(), [&](const v1::BatchJob& j) {
    return j.counts().completed() == 2 && backend.held() == 2;
  });
  EXPECT_EQ(Get(service, created.id()).status(), v1::BATCH_JOB_STATUS_IN_PROGRESS);
  grpc::ServerContext context;
  v1::CancelBatchJobRequest cancel;
  cancel.set_id(created.id());
  v1::BatchJob cancelling;
  ASSERT_TRUE(service.CancelBatchJob(&context, &cancel, &cancelling).ok());
  EXPECT_TRUE(cancelling.has_cancelling_at());
  const v1::BatchJob job = WaitStatus(service, created.id(), v1::BATCH_JOB_STATUS_CANCELLED);
  EXPECT_EQ(job.counts().completed(), 2u);
  EXPECT_EQ(job.counts().cancelled(), 4u);
  EXPECT_EQ(job.results_cursor_end(), 6u);
  EXPECT_EQ(backend.held(), 0);
  EXPECT_EQ(backend.max_held(), 2);  // the in-flight cap held
  EXPECT_TRUE(job.has_cancelled_at());
  // Cancelling an ended job changes nothing.
  v1::BatchJob again;
  ASSERT_TRUE(service.CancelBatchJob(&context, &cancel, &again).ok());
  EXPECT_EQ(again.status(), v1::BATCH_JOB_STATUS_CANCELLED);
  cancel.set_id("batch_unknown");
  EXPECT_EQ(service.CancelBatchJob(&context, &cancel, &again).error_code(),
            grpc::StatusCode::NOT_FOUND);
}

TEST(BatchJobsServiceTest, QueuedJobsWaitAndCancelAtOnce) {
  FakeBackend backend;
  BatchJobsService service(backend, BatchJobsOptions{.max_concurrent_jobs = 1});
  const v1::BatchJob running = Create(service, Request({kLong}));
  WaitStatus(service, running.id(), v1::BATCH_JOB_STATUS_IN_PROGRESS);
  const v1::BatchJob queued = Create(service, Request({1, 2, 3}));
  EXPECT_EQ(Get(service, queued.id()).status(), v1::BATCH_JOB_STATUS_QUEUED);
  grpc::ServerContext context;
  v1::CancelBatchJobRequest cancel;
  cancel.set_id(queued.id());
  v1::BatchJob job;
  ASSERT_TRUE(service.CancelBatchJob(&context, &cancel, &job).ok());
  EXPECT_EQ(job.status(), v1::BATCH_JOB_STATUS_CANCELLED);
  EXPECT_EQ(job.counts().cancelled(), 3u);
  EXPECT_EQ(ReadAll(service, queued.id()).size(), 3u);
  service.Stop();
  const v1::BatchJob stopped = Get(service, running.id());
  EXPECT_EQ(stopped.status(), v1::BATCH_JOB_STATUS_FAILED);
  ASSERT_EQ(stopped.job_errors_size(), 1);
  EXPECT_EQ(stopped.counts().cancelled(), 1u);
}

TEST(BatchJobsServiceTest, AJobPastItsWindowExpires) {
  FakeBackend backend;
  BatchJobsService service(backend, BatchJobsOptions{});
  v1::CreateBatchJobRequest request = Request({1, kLong, kLong});
  request.mutable_completion_window()->set_seconds(1);
  const v1::BatchJob created = Create(service, request);
  const v1::BatchJob job = WaitStatus(service, created.id(), v1::BATCH_JOB_STATUS_EXPIRED);
  EXPECT_EQ(job.counts().completed(), 1u);
  EXPECT_EQ(job.counts().cancelled(), 2u);
  EXPECT_TRUE(job.has_expired_at());
  EXPECT_EQ(backend.held(), 0);
}

TEST(BatchJobsServiceTest, RetriesWhenTheStepLoopIsFull) {
  FakeBackend backend;
  backend.set_exhausted(3);
  BatchJobsService service(backend, BatchJobsOptions{});
  const v1::BatchJob created = Create(service, Request({1, 2}));
  const v1::BatchJob job = WaitStatus(service, created.id(), v1::BATCH_JOB_STATUS_COMPLETED);
  EXPECT_EQ(job.counts().completed(), 2u);
}

TEST(BatchJobsServiceTest, ListsNewestFirstInPages) {
  FakeBackend backend;
  BatchJobsService service(backend, BatchJobsOptions{});
  std::vector<std::string> ids;
  for (int i = 0; i < 5; ++i) ids.push_back(Create(service, Request({1})).id());
  std::vector<std::string> listed;
  v1::ListBatchJobsRequest request;
  request.set_page_size(2);
  int pages = 0;
  do {
    grpc::ServerContext context;
    v1::ListBatchJobsResponse response;
    ASSERT_TRUE(service.ListBatchJobs(&context, &request, &response).ok());
    for (const v1::BatchJob& job : response.jobs()) listed.push_back(job.id());
    request.set_page_token(response.next_page_token());
    ++pages;
  } while (!request.page_token().empty() && pages < 10);
  EXPECT_EQ(pages, 3);
  EXPECT_EQ(listed, std::vector<std::string>(ids.rbegin(), ids.rend()));
  grpc::ServerContext context;
  v1::ListBatchJobsResponse response;
  request.set_page_token("garbage");
  EXPECT_EQ(service.ListBatchJobs(&context, &request, &response).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
}

TEST(BatchJobsServiceTest, EndedJobsAreDroppedAfterTheResultTtl) {
  FakeBackend backend;
  BatchJobsService service(backend, BatchJobsOptions{.result_ttl = absl::Milliseconds(300)});
  const v1::BatchJob created = Create(service, Request({1}));
  WaitStatus(service, created.id(), v1::BATCH_JOB_STATUS_COMPLETED);
  absl::SleepFor(absl::Milliseconds(400));
  grpc::ServerContext context;
  v1::GetBatchJobRequest request;
  request.set_id(created.id());
  v1::BatchJob job;
  EXPECT_EQ(service.GetBatchJob(&context, &request, &job).error_code(),
            grpc::StatusCode::NOT_FOUND);
}

}  // namespace
}  // namespace weir::coordinator
