// Batch jobs (weir.v1.BatchJobs) end to end on a local 2-worker cluster:
// a job runs to COMPLETED with a per-item failure, its results are read in
// two parts across a reconnect and equal what GenerateBatch returns; a long
// job is cancelled mid-way; idempotency keys and unknown ids.

#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/grpc_util.h"
#include "gtest/gtest.h"
#include "proto/batch.grpc.pb.h"
#include "proto/inference.grpc.pb.h"
#include "tests/local_cluster.h"

namespace weir {
namespace {

using testing_util::Cluster;

class BatchJobsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    cluster_ = new Cluster({"--workers=2"});
    stub_ = v1::BatchJobs::NewStub(MakeChannel(cluster_->address())).release();
  }
  static void TearDownTestSuite() {
    delete stub_;
    delete cluster_;
  }

  static v1::BatchJob Get(const std::string& id) {
    grpc::ClientContext context;
    v1::GetBatchJobRequest request;
    request.set_id(id);
    v1::BatchJob job;
    grpc::Status s = stub_->GetBatchJob(&context, request, &job);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return job;
  }

  static v1::BatchJob WaitUntil(const std::string& id,
                                std::function<bool(const v1::BatchJob&)> done) {
    const absl::Time deadline = absl::Now() + absl::Seconds(40);
    v1::BatchJob job;
    do {
      job = Get(id);
      if (done(job)) return job;
      absl::SleepFor(absl::Milliseconds(50));
    } while (absl::Now() < deadline);
    ADD_FAILURE() << "timed out in " << v1::BatchJobStatus_Name(job.status());
    return job;
  }

  // Reads from `cursor`; stops after `limit` results (then disconnects).
  static grpc::Status Read(const std::string& id, uint64_t cursor, size_t limit,
                           std::vector<v1::BatchItemResult>& out) {
    grpc::ClientContext context;
    v1::ReadBatchResultsRequest request;
    request.set_job_id(id);
    request.set_cursor(cursor);
    request.set_include_successes(true);
    request.set_include_errors(true);
    auto reader = stub_->ReadBatchResults(&context, request);
    v1::BatchItemResult result;
    size_t n = 0;
    while (n < limit && reader->Read(&result)) {
      out.push_back(result);
      ++n;
    }
    if (n == limit) context.TryCancel();
    return reader->Finish();
  }

  static Cluster* cluster_;
  static v1::BatchJobs::Stub* stub_;
};

Cluster* BatchJobsTest::cluster_ = nullptr;
v1::BatchJobs::Stub* BatchJobsTest::stub_ = nullptr;

v1::GenerateRequest Greedy(uint32_t max_new) {
  v1::GenerateRequest defaults;
  defaults.mutable_sampling()->set_temperature(0.0f);
  defaults.mutable_stop()->set_max_new_tokens(max_new);
  defaults.mutable_stop()->set_ignore_eos(true);
  return defaults;
}

std::vector<v1::BatchItem> TenItems() {
  std::vector<v1::BatchItem> items;
  for (int i = 0; i < 10; ++i) {
    v1::BatchItem item;
    item.set_custom_id(absl::StrCat("item-", i));
    auto* ids = item.mutable_request()->mutable_tokens();
    if (i == 3) {
      ids->add_ids(99999);  // out of vocabulary: a failed item, not a failed job
    } else {
      for (int j = 0; j < 3 + i; ++j) ids->add_ids(static_cast<uint32_t>(11 + 37 * i + 5 * j));
    }
    items.push_back(item);
  }
  return items;
}

TEST_F(BatchJobsTest, CompletesAndResumesFromACursor) {
  v1::CreateBatchJobRequest request;
  request.set_idempotency_key("e2e-ten");
  *request.mutable_defaults() = Greedy(6);
  for (const v1::BatchItem& item : TenItems()) *request.mutable_items()->add_items() = item;
  (*request.mutable_labels())["suite"] = "e2e";
  v1::BatchJob created;
  {
    grpc::ClientContext context;
    ASSERT_TRUE(stub_->CreateBatchJob(&context, request, &created).ok());
  }
  EXPECT_EQ(created.counts().total(), 10u);
  {  // Same key, same request: the same job.
    grpc::ClientContext context;
    v1::BatchJob again;
    ASSERT_TRUE(stub_->CreateBatchJob(&context, request, &again).ok());
    EXPECT_EQ(again.id(), created.id());
  }
  {  // Same key, another request: refused.
    v1::CreateBatchJobRequest other = request;
    other.mutable_defaults()->mutable_stop()->set_max_new_tokens(7);
    grpc::ClientContext context;
    v1::BatchJob job;
    EXPECT_EQ(stub_->CreateBatchJob(&context, other, &job).error_code(),
              grpc::StatusCode::ALREADY_EXISTS);
  }

  const v1::BatchJob job = WaitUntil(created.id(), [](const v1::BatchJob& j) {
    return j.status() == v1::BATCH_JOB_STATUS_COMPLETED;
  });
  EXPECT_EQ(job.counts().completed(), 9u);
  EXPECT_EQ(job.counts().failed(), 1u);
  EXPECT_EQ(job.results_cursor_end(), 10u);
  EXPECT_EQ(job.labels().at("suite"), "e2e");

  // Two parts with a reconnect at the last cursor seen.
  std::vector<v1::BatchItemResult> results;
  Read(created.id(), 0, 4, results);
  ASSERT_EQ(results.size(), 4u);
  ASSERT_TRUE(Read(created.id(), results.back().cursor() + 1, 100, results).ok());
  ASSERT_EQ(results.size(), 10u);
  std::set<std::string> seen;
  for (size_t i = 0; i < results.size(); ++i) {
    EXPECT_EQ(results[i].cursor(), i);
    EXPECT_TRUE(seen.insert(results[i].item().custom_id()).second);
  }

  // The same items through GenerateBatch give the same outputs.
  v1::GenerateBatchRequest batch;
  *batch.mutable_defaults() = Greedy(6);
  for (const v1::BatchItem& item : TenItems()) *batch.add_items() = item;
  grpc::ClientContext batch_context;
  auto reader = cluster_->stub().GenerateBatch(&batch_context, batch);
  std::map<std::string, v1::BatchEvent::ItemResult> expected;
  v1::BatchEvent event;
  while (reader->Read(&event)) {
    if (event.has_item_result()) expected[event.item_result().custom_id()] = event.item_result();
  }
  ASSERT_TRUE(reader->Finish().ok());
  ASSERT_EQ(expected.size(), 10u);
  for (const v1::BatchItemResult& r : results) {
    const v1::BatchEvent::ItemResult& want = expected[r.item().custom_id()];
    if (r.item().custom_id() == "item-3") {
      EXPECT_EQ(r.item().error().code(), static_cast<int>(grpc::StatusCode::INVALID_ARGUMENT));
      EXPECT_EQ(want.error().code(), r.item().error().code());
      continue;
    }
    ASSERT_TRUE(r.item().has_result()) << r.item().error().message();
    ASSERT_TRUE(want.has_result());
    const auto& got_ids = r.item().result().samples(0).full_token_ids();
    const auto& want_ids = want.result().samples(0).full_token_ids();
    EXPECT_EQ(std::vector<uint32_t>(got_ids.begin(), got_ids.end()),
              std::vector<uint32_t>(want_ids.begin(), want_ids.end()))
        << r.item().custom_id();
    EXPECT_EQ(got_ids.size(), 6);
  }

  // Only the errors.
  grpc::ClientContext context;
  v1::ReadBatchResultsRequest errors;
  errors.set_job_id(created.id());
  errors.set_include_errors(true);
  errors.set_include_successes(false);
  auto error_reader = stub_->ReadBatchResults(&context, errors);
  v1::BatchItemResult result;
  int n = 0;
  while (error_reader->Read(&result)) {
    ++n;
    EXPECT_EQ(result.item().custom_id(), "item-3");
    EXPECT_LT(result.cursor(), 10u);
  }
  EXPECT_TRUE(error_reader->Finish().ok());
  EXPECT_EQ(n, 1);
}

TEST_F(BatchJobsTest, CancelMidWayKeepsFinishedResults) {
  v1::CreateBatchJobRequest request;
  *request.mutable_defaults() = Greedy(4000);
  for (int i = 0; i < 6; ++i) {
    v1::BatchItem* item = request.mutable_items()->add_items();
    item->set_custom_id(absl::StrCat("long-", i));
    item->mutable_request()->mutable_tokens()->add_ids(100 + i);
    if (i < 2) item->mutable_request()->mutable_stop()->set_max_new_tokens(2);  // quick ones
    if (i < 2) item->mutable_request()->mutable_stop()->set_ignore_eos(true);
  }
  v1::BatchJob created;
  {
    grpc::ClientContext context;
    ASSERT_TRUE(stub_->CreateBatchJob(&context, request, &created).ok());
  }
  // A reader follows the job while it runs and ends when it ends.
  std::vector<v1::BatchItemResult> streamed;
  grpc::Status stream_status;
  std::thread follower([&] { stream_status = Read(created.id(), 0, 1000, streamed); });

  WaitUntil(created.id(), [](const v1::BatchJob& j) { return j.counts().completed() >= 2; });
  v1::BatchJob cancelling;
  {
    grpc::ClientContext context;
    v1::CancelBatchJobRequest cancel;
    cancel.set_id(created.id());
    ASSERT_TRUE(stub_->CancelBatchJob(&context, cancel, &cancelling).ok());
  }
  EXPECT_TRUE(cancelling.status() == v1::BATCH_JOB_STATUS_CANCELLING ||
              cancelling.status() == v1::BATCH_JOB_STATUS_CANCELLED);
  const v1::BatchJob job = WaitUntil(created.id(), [](const v1::BatchJob& j) {
    return j.status() == v1::BATCH_JOB_STATUS_CANCELLED;
  });
  follower.join();
  EXPECT_TRUE(stream_status.ok()) << stream_status.error_message();
  EXPECT_EQ(job.counts().completed(), 2u);
  EXPECT_EQ(job.counts().cancelled(), 4u);
  EXPECT_TRUE(job.has_cancelling_at());
  EXPECT_TRUE(job.has_cancelled_at());
  ASSERT_EQ(streamed.size(), 6u);
  for (size_t i = 0; i < streamed.size(); ++i) {
    EXPECT_EQ(streamed[i].cursor(), i);
    const auto& item = streamed[i].item();
    if (item.custom_id() == "long-0" || item.custom_id() == "long-1") {
      ASSERT_TRUE(item.has_result());
      EXPECT_EQ(item.result().samples(0).full_token_ids_size(), 2);
    } else {
      EXPECT_EQ(item.error().code(), static_cast<int>(grpc::StatusCode::CANCELLED));
    }
  }
  // The cluster still serves interactive requests.
  std::vector<uint32_t> tokens;
  EXPECT_TRUE(cluster_->Greedy({10, 20, 30}, 4, tokens).ok());
  EXPECT_EQ(tokens.size(), 4u);
}

TEST_F(BatchJobsTest, UnknownJobsAndBadInputs) {
  grpc::ClientContext get_context;
  v1::GetBatchJobRequest get;
  get.set_id("batch_0000000000000000");
  v1::BatchJob job;
  EXPECT_EQ(stub_->GetBatchJob(&get_context, get, &job).error_code(),
            grpc::StatusCode::NOT_FOUND);
  grpc::ClientContext cancel_context;
  v1::CancelBatchJobRequest cancel;
  cancel.set_id("nope");
  EXPECT_EQ(stub_->CancelBatchJob(&cancel_context, cancel, &job).error_code(),
            grpc::StatusCode::NOT_FOUND);
  std::vector<v1::BatchItemResult> out;
  EXPECT_EQ(Read("nope", 0, 10, out).error_code(), grpc::StatusCode::NOT_FOUND);
  grpc::ClientContext create_context;
  v1::CreateBatchJobRequest request;
  request.set_input_uri("s3://bucket/input.jsonl");
  EXPECT_EQ(stub_->CreateBatchJob(&create_context, request, &job).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  grpc::ClientContext list_context;
  v1::ListBatchJobsResponse list;
  ASSERT_TRUE(stub_->ListBatchJobs(&list_context, v1::ListBatchJobsRequest(), &list).ok());
  for (const v1::BatchJob& listed : list.jobs()) EXPECT_FALSE(listed.id().empty());
}

}  // namespace
}  // namespace weir
