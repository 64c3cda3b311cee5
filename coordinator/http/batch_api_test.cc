#include "coordinator/http/batch_api.h"

#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "base/grpc_util.h"

namespace weir::coordinator::http {
namespace {

// Records CreateBatchJob requests; serves canned jobs and results.
class FakeBatchJobs final : public v1::BatchJobs::Service {
 public:
  grpc::Status CreateBatchJob(grpc::ServerContext*, const v1::CreateBatchJobRequest* request,
                              v1::BatchJob* job) override {
    absl::MutexLock lock(&mu_);
    created_ = *request;
    job->set_id("job1");
    job->set_status(v1::BATCH_JOB_STATUS_QUEUED);
    job->mutable_created_at()->set_seconds(100);
    job->mutable_expires_at()->set_seconds(100 + request->completion_window().seconds());
    *job->mutable_completion_window() = request->completion_window();
    job->mutable_labels()->insert(request->labels().begin(), request->labels().end());
    job->mutable_counts()->set_total(request->items().items_size());
    return grpc::Status::OK;
  }

  grpc::Status GetBatchJob(grpc::ServerContext*, const v1::GetBatchJobRequest* request,
                           v1::BatchJob* job) override {
    if (request->id() != "job1") return grpc::Status(grpc::StatusCode::NOT_FOUND, "no job");
    *job = Ended();
    return grpc::Status::OK;
  }

  grpc::Status CancelBatchJob(grpc::ServerContext*, const v1::CancelBatchJobRequest* request,
                              v1::BatchJob* job) override {
    job->set_id(request->id());
    job->set_status(v1::BATCH_JOB_STATUS_CANCELLING);
    job->mutable_cancelling_at()->set_seconds(150);
    return grpc::Status::OK;
  }

  grpc::Status ListBatchJobs(grpc::ServerContext*, const v1::ListBatchJobsRequest*,
                             v1::ListBatchJobsResponse* response) override {
    for (const char* id : {"c", "b", "a"}) response->add_jobs()->set_id(id);
    return grpc::Status::OK;
  }

  grpc::Status ReadBatchResults(grpc::ServerContext*, const v1::ReadBatchResultsRequest* request,
                                grpc::ServerWriter<v1::BatchItemResult>* writer) override {
    v1::BatchItemResult ok;
    ok.set_cursor(0);
    ok.mutable_item()->set_custom_id("a");
    v1::GenerateEvent::Final* sample = ok.mutable_item()->mutable_result()->add_samples();
    sample->set_reason(v1::FINISH_REASON_EOS);
    sample->set_full_text("hi there");
    sample->mutable_usage()->set_prompt_tokens(4);
    sample->mutable_usage()->set_completion_tokens(2);
    // An item with n = 3: one result, three samples.
    v1::BatchItemResult multi;
    multi.set_cursor(3);
    multi.mutable_item()->set_custom_id("n3");
    for (uint32_t i = 0; i < 3; ++i) {
      v1::GenerateEvent::Final* s = multi.mutable_item()->mutable_result()->add_samples();
      s->set_sample_index(i);
      s->set_reason(v1::FINISH_REASON_MAX_TOKENS);
      s->set_full_text("sample " + std::to_string(i));
      s->mutable_usage()->set_prompt_tokens(4);
      s->mutable_usage()->set_completion_tokens(2);
    }
    v1::BatchItemResult bad;
    bad.set_cursor(1);
    bad.mutable_item()->set_custom_id("b");
    bad.mutable_item()->mutable_error()->set_code(
        static_cast<int>(grpc::StatusCode::INVALID_ARGUMENT));
    bad.mutable_item()->mutable_error()->set_message("sampling.top_p: must be in (0, 1]");
    v1::BatchItemResult cancelled;
    cancelled.set_cursor(2);
    cancelled.mutable_item()->set_custom_id("c");
    cancelled.mutable_item()->mutable_error()->set_code(
        static_cast<int>(grpc::StatusCode::CANCELLED));
    cancelled.mutable_item()->mutable_error()->set_message("the job was cancelled");
    if (request->include_successes()) {
      writer->Write(ok);
      writer->Write(multi);
    }
    if (request->include_errors()) {
      writer->Write(bad);
      writer->Write(cancelled);
    }
    return grpc::Status::OK;
  }

  static v1::BatchJob Ended() {
    v1::BatchJob job;
    job.set_id("job1");
    job.set_status(v1::BATCH_JOB_STATUS_CANCELLED);
    job.mutable_created_at()->set_seconds(100);
    job.mutable_started_at()->set_seconds(101);
    job.mutable_cancelled_at()->set_seconds(160);
    job.mutable_completion_window()->set_seconds(24 * 3600);
    (*job.mutable_labels())["openai.endpoint"] = "/v1/chat/completions";
    (*job.mutable_labels())["openai.input_file_id"] = "file-1";
    (*job.mutable_labels())["metadata.k"] = "v";
    job.mutable_counts()->set_total(3);
    job.mutable_counts()->set_completed(1);
    job.mutable_counts()->set_failed(1);
    job.mutable_counts()->set_cancelled(1);
    return job;
  }

  v1::CreateBatchJobRequest created() {
    absl::MutexLock lock(&mu_);
    return created_;
  }

 private:
  absl::Mutex mu_;
  v1::CreateBatchJobRequest created_ ABSL_GUARDED_BY(mu_);
};

ServedModel Served() {
  ServedModel served;
  served.name = "tiny";
  served.max_new_tokens_limit = 1000;
  served.max_stop_sequences = 4;
  return served;
}

Json Parse(const HttpReply& reply) { return Json::parse(reply.body); }

std::string Line(const std::string& custom_id, const std::string& body,
                 const std::string& url = "/v1/chat/completions") {
  return Dump(Json{
      {"custom_id", custom_id}, {"method", "POST"}, {"url", url}, {"body", Json::parse(body)}});
}

constexpr char kChatBody[] =
    R"({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 5})";

TEST(BatchApiTest, Files) {
  FakeBatchJobs service;
  absl::StatusOr<StartedServer> server = StartServer({.address = "127.0.0.1:0"}, {&service});
  ASSERT_TRUE(server.ok());
  auto stub = v1::BatchJobs::NewStub(server->server->InProcessChannel(grpc::ChannelArguments()));
  const ServedModel served = Served();
  BatchApi api(*stub, served, nullptr, {.max_files = 2, .max_file_bytes = 100});

  HttpReply r = api.UploadFile("x.jsonl", "fine-tune", "abc");
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(Parse(r)["error"]["param"], "purpose");
  EXPECT_EQ(api.UploadFile("x.jsonl", "batch", "").status, 400);
  r = api.UploadFile("x.jsonl", "batch", "abc");
  ASSERT_EQ(r.status, 200) << r.body;
  const Json file = Parse(r);
  EXPECT_EQ(file["object"], "file");
  EXPECT_EQ(file["bytes"], 3);
  EXPECT_EQ(file["filename"], "x.jsonl");
  EXPECT_EQ(file["purpose"], "batch");
  const std::string id = file["id"];
  EXPECT_EQ(Parse(api.GetFile(id))["id"], id);
  EXPECT_EQ(api.FileContent(id).body, "abc");
  EXPECT_EQ(Parse(api.ListFiles())["data"].size(), 1u);
  // Limits: bytes, then count.
  r = api.UploadFile("big", "batch", std::string(98, 'x'));
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(Parse(r)["error"]["code"], "file_store_full");
  EXPECT_EQ(api.UploadFile("second", "batch", "d").status, 200);
  EXPECT_EQ(api.UploadFile("third", "batch", "e").status, 400);
  EXPECT_EQ(Parse(api.DeleteFile(id))["deleted"], true);
  EXPECT_EQ(api.GetFile(id).status, 404);
  EXPECT_EQ(api.DeleteFile(id).status, 404);
  EXPECT_EQ(api.UploadFile("third", "batch", "e").status, 200);
}

TEST(BatchApiTest, CreateValidatesEveryLineAndMapsTheRest) {
  FakeBatchJobs service;
  absl::StatusOr<StartedServer> server = StartServer({.address = "127.0.0.1:0"}, {&service});
  ASSERT_TRUE(server.ok());
  auto stub = v1::BatchJobs::NewStub(server->server->InProcessChannel(grpc::ChannelArguments()));
  const ServedModel served = Served();
  BatchApi api(*stub, served, nullptr);
  auto upload = [&](const std::vector<std::string>& lines) {
    std::string content;
    for (const std::string& l : lines) content += l + "\n";
    return Parse(api.UploadFile("in.jsonl", "batch", content))["id"].get<std::string>();
  };
  auto create = [&](const std::string& file, const std::string& extra = "") {
    return api.CreateBatch(
        R"({"input_file_id": ")" + file + R"(", "endpoint": "/v1/chat/completions")" + extra + "}",
        "");
  };
  auto refusal = [&](const HttpReply& r) {
    return std::make_pair(r.status, Parse(r)["error"]["param"].is_null()
                                        ? std::string()
                                        : Parse(r)["error"]["param"].get<std::string>());
  };

  const std::string good = upload({Line("a", kChatBody), "", Line("b", kChatBody)});
  EXPECT_EQ(refusal(api.CreateBatch(
                R"({"input_file_id": ")" + good + R"(", "endpoint": "/v1/embeddings"})", "")),
            std::make_pair(400, std::string("endpoint")));
  EXPECT_EQ(refusal(create("file-404")), std::make_pair(404, std::string("input_file_id")));
  EXPECT_EQ(refusal(create(good, R"(, "completion_window": "2d")")).second, "completion_window");
  EXPECT_EQ(refusal(create(good, R"(, "metadata": {"k": 5})")).second, "metadata");
  EXPECT_EQ(api.CreateBatch("[]", "").status, 400);

  HttpReply r = create(upload({Line("a", kChatBody), "{not json"}));
  EXPECT_EQ(r.status, 400);
  EXPECT_TRUE(absl::StrContains(Parse(r)["error"]["message"].get<std::string>(), "line 2"))
      << r.body;
  EXPECT_EQ(create(upload({Line("a", kChatBody), Line("a", kChatBody)})).status, 400);
  EXPECT_EQ(create(upload({Line("a", kChatBody, "/v1/completions")})).status, 400);
  EXPECT_EQ(create(upload({Line("", kChatBody)})).status, 400);
  // `n` beyond what the server advertises is refused naming the line ...
  r = create(upload({Line("a", R"({"messages": [{"role": "user", "content": "x"}], "n": 2})")}));
  EXPECT_EQ(refusal(r), std::make_pair(400, std::string("n")));
  EXPECT_TRUE(absl::StartsWith(Parse(r)["error"]["message"].get<std::string>(), "line 1: n"));
  {  // ... and within it becomes the item's num_samples.
    ServedModel more = Served();
    more.max_num_samples = 4;
    BatchApi api3(*stub, more, nullptr);
    const std::string file =
        Parse(api3.UploadFile("n.jsonl", "batch",
                              Line("a", R"({"messages": [{"role": "user", "content": "x"}],
                                            "n": 3})")))["id"]
            .get<std::string>();
    const HttpReply made = api3.CreateBatch(
        R"({"input_file_id": ")" + file + R"(", "endpoint": "/v1/chat/completions"})", "");
    ASSERT_EQ(made.status, 200) << made.body;
    EXPECT_EQ(service.created().items().items(0).request().sampling().num_samples(), 3u);
  }
  EXPECT_EQ(create(upload({Line("a", R"({"messages": [{"role": "user", "content": "x"}],
                                         "stream": true})")}))
                .status,
            400);
  EXPECT_EQ(create(upload({"", "  "})).status, 400);

  r = create(good, R"(, "completion_window": "48h", "metadata": {"k": "v"})");
  ASSERT_EQ(r.status, 200) << r.body;
  const v1::CreateBatchJobRequest sent = service.created();
  ASSERT_EQ(sent.items().items_size(), 2);
  EXPECT_EQ(sent.items().items(1).custom_id(), "b");
  const v1::GenerateRequest& item = sent.items().items(0).request();
  EXPECT_EQ(item.chat().messages(0).content(), "hi");
  EXPECT_EQ(item.stop().max_new_tokens(), 5u);
  EXPECT_FALSE(item.output().stream_tokens());
  EXPECT_EQ(sent.completion_window().seconds(), 48 * 3600);
  EXPECT_EQ(sent.labels().at("openai.endpoint"), "/v1/chat/completions");
  EXPECT_EQ(sent.labels().at("openai.input_file_id"), good);
  EXPECT_EQ(sent.labels().at("metadata.k"), "v");
  const Json batch = Parse(r);
  EXPECT_EQ(batch["id"], "job1");
  EXPECT_EQ(batch["object"], "batch");
  EXPECT_EQ(batch["status"], "in_progress");
  EXPECT_EQ(batch["endpoint"], "/v1/chat/completions");
  EXPECT_EQ(batch["input_file_id"], good);
  EXPECT_EQ(batch["completion_window"], "48h");
  EXPECT_EQ(batch["metadata"], Json::parse(R"({"k": "v"})"));
  EXPECT_TRUE(batch["output_file_id"].is_null());
  EXPECT_TRUE(batch["in_progress_at"].is_null());
  EXPECT_EQ(batch["request_counts"], Json::parse(R"({"total": 2, "completed": 0, "failed": 0})"));
}

TEST(BatchApiTest, EndedBatchAndItsFiles) {
  FakeBatchJobs service;
  absl::StatusOr<StartedServer> server = StartServer({.address = "127.0.0.1:0"}, {&service});
  ASSERT_TRUE(server.ok());
  auto stub = v1::BatchJobs::NewStub(server->server->InProcessChannel(grpc::ChannelArguments()));
  const ServedModel served = Served();
  BatchApi api(*stub, served, nullptr);

  const Json batch = Parse(api.GetBatch("job1", ""));
  EXPECT_EQ(batch["status"], "cancelled");
  EXPECT_EQ(batch["in_progress_at"], 101);
  EXPECT_EQ(batch["cancelled_at"], 160);
  EXPECT_EQ(batch["request_counts"], Json::parse(R"({"total": 3, "completed": 1, "failed": 2})"));
  EXPECT_EQ(batch["output_file_id"], "file-output-job1");
  EXPECT_EQ(batch["error_file_id"], "file-errors-job1");
  EXPECT_EQ(api.GetBatch("nope", "").status, 404);

  const HttpReply output = api.FileContent("file-output-job1");
  ASSERT_EQ(output.status, 200) << output.body;
  std::vector<std::string> lines = absl::StrSplit(output.body, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 2u);
  const Json ok = Json::parse(lines[0]);
  EXPECT_EQ(ok["custom_id"], "a");
  EXPECT_TRUE(ok["error"].is_null());
  EXPECT_EQ(ok["response"]["status_code"], 200);
  const Json body = ok["response"]["body"];
  EXPECT_EQ(body["object"], "chat.completion");
  EXPECT_EQ(body["choices"][0]["message"]["content"], "hi there");
  EXPECT_EQ(body["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(body["usage"]["total_tokens"], 6);
  // The n = 3 item: one choice per sample, by sample_index; usage adds them up.
  const Json multi = Json::parse(lines[1])["response"]["body"];
  ASSERT_EQ(multi["choices"].size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(multi["choices"][i]["index"], i);
    EXPECT_EQ(multi["choices"][i]["message"]["content"], "sample " + std::to_string(i));
    EXPECT_EQ(multi["choices"][i]["finish_reason"], "length");
  }
  EXPECT_EQ(multi["usage"]["prompt_tokens"], 4);
  EXPECT_EQ(multi["usage"]["completion_tokens"], 6);
  EXPECT_EQ(Parse(api.GetFile("file-output-job1"))["bytes"], output.body.size());

  lines = absl::StrSplit(api.FileContent("file-errors-job1").body, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 2u);
  const Json bad = Json::parse(lines[0]);
  EXPECT_EQ(bad["custom_id"], "b");
  EXPECT_EQ(bad["response"]["status_code"], 400);
  EXPECT_EQ(bad["response"]["body"]["error"]["param"], "top_p");
  const Json cancelled = Json::parse(lines[1]);
  EXPECT_TRUE(cancelled["response"].is_null());
  EXPECT_EQ(cancelled["error"]["code"], "batch_cancelled");
  EXPECT_EQ(api.FileContent("file-output-other").status, 404);
  EXPECT_EQ(api.DeleteFile("file-output-job1").status, 400);

  EXPECT_EQ(Parse(api.CancelBatch("job1", ""))["status"], "cancelling");
}

TEST(BatchApiTest, ListPagesNewestFirst) {
  FakeBatchJobs service;
  absl::StatusOr<StartedServer> server = StartServer({.address = "127.0.0.1:0"}, {&service});
  ASSERT_TRUE(server.ok());
  auto stub = v1::BatchJobs::NewStub(server->server->InProcessChannel(grpc::ChannelArguments()));
  const ServedModel served = Served();
  BatchApi api(*stub, served, nullptr);
  Json page = Parse(api.ListBatches("", 2, ""));
  ASSERT_EQ(page["data"].size(), 2u);
  EXPECT_EQ(page["first_id"], "c");
  EXPECT_EQ(page["last_id"], "b");
  EXPECT_EQ(page["has_more"], true);
  page = Parse(api.ListBatches("b", 2, ""));
  ASSERT_EQ(page["data"].size(), 1u);
  EXPECT_EQ(page["data"][0]["id"], "a");
  EXPECT_EQ(page["has_more"], false);
  EXPECT_EQ(api.ListBatches("", 0, "").status, 400);
}

}  // namespace
}  // namespace weir::coordinator::http
