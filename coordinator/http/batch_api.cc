#include "coordinator/http/batch_api.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"

namespace weir::coordinator::http {
namespace {

constexpr char kChatEndpoint[] = "/v1/chat/completions";
constexpr char kCompletionsEndpoint[] = "/v1/completions";
constexpr char kEndpointLabel[] = "openai.endpoint";
constexpr char kInputFileLabel[] = "openai.input_file_id";
constexpr char kMetadataPrefix[] = "metadata.";
constexpr char kOutputPrefix[] = "file-output-";
constexpr char kErrorsPrefix[] = "file-errors-";
constexpr size_t kMaxMetadata = 14;  // BatchJob labels: 16, two are ours

HttpReply JsonReply(int status, const Json& body) {
  return HttpReply{.status = status, .body = Dump(body)};
}

HttpReply ErrorReply(const ApiError& error) {
  return JsonReply(error.http_status, ErrorBody(error));
}

HttpReply Invalid(const std::string& param, const std::string& message,
                  const std::string& code = "") {
  return ErrorReply(ApiError{.http_status = 400,
                             .type = "invalid_request_error",
                             .message = message,
                             .param = param,
                             .code = code});
}

HttpReply NotFound(const std::string& what, const std::string& param) {
  return ErrorReply(ApiError{.http_status = 404,
                             .type = "invalid_request_error",
                             .message = "No such " + what,
                             .param = param,
                             .code = "not_found"});
}

HttpReply FromGrpc(const grpc::Status& status) {
  return ErrorReply(ToApiError(status, Endpoint::kCompletions));
}

void Prepare(grpc::ClientContext& context, const std::string& authorization) {
  if (!authorization.empty()) context.AddMetadata("authorization", authorization);
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
}

Json Seconds(bool has, const google::protobuf::Timestamp& t) {
  return has ? Json(t.seconds()) : Json(nullptr);
}

const char* StatusName(v1::BatchJobStatus status) {
  switch (status) {
    case v1::BATCH_JOB_STATUS_VALIDATING:
      return "validating";
    case v1::BATCH_JOB_STATUS_QUEUED:
    case v1::BATCH_JOB_STATUS_IN_PROGRESS:
      return "in_progress";
    case v1::BATCH_JOB_STATUS_FINALIZING:
      return "finalizing";
    case v1::BATCH_JOB_STATUS_COMPLETED:
      return "completed";
    case v1::BATCH_JOB_STATUS_FAILED:
      return "failed";
    case v1::BATCH_JOB_STATUS_EXPIRED:
      return "expired";
    case v1::BATCH_JOB_STATUS_CANCELLING:
      return "cancelling";
    case v1::BATCH_JOB_STATUS_CANCELLED:
      return "cancelled";
    default:
      return "validating";
  }
}

bool Terminal(v1::BatchJobStatus status) {
  return status == v1::BATCH_JOB_STATUS_COMPLETED || status == v1::BATCH_JOB_STATUS_FAILED ||
         status == v1::BATCH_JOB_STATUS_EXPIRED || status == v1::BATCH_JOB_STATUS_CANCELLED;
}

std::string Label(const v1::BatchJob& job, const std::string& key) {
  auto it = job.labels().find(key);
  return it == job.labels().end() ? "" : it->second;
}

}  // namespace

BatchApi::BatchApi(v1::BatchJobs::Stub& stub, const ServedModel& served, TokenBytes token_bytes,
                   BatchApiOptions options)
    : stub_(stub), served_(served), token_bytes_(std::move(token_bytes)), options_(options) {}

Json BatchApi::FileJson(const std::string& id, const File& file) const {
  return Json{{"id", id},
              {"object", "file"},
              {"bytes", file.content.size()},
              {"created_at", file.created_at},
              {"filename", file.filename},
              {"purpose", file.purpose},
              {"status", "processed"},
              {"status_details", nullptr}};
}

HttpReply BatchApi::UploadFile(const std::string& filename, const std::string& purpose,
                               std::string content) {
  if (purpose != "batch") return Invalid("purpose", "only purpose \"batch\" is supported");
  if (content.empty()) return Invalid("file", "the file is missing or empty");
  absl::MutexLock lock(&mu_);
  if (files_.size() >= options_.max_files ||
      file_bytes_ + content.size() > options_.max_file_bytes) {
    return Invalid("file",
                   absl::StrCat("the file store is full (", options_.max_files, " files, ",
                                options_.max_file_bytes, " bytes); delete files first"),
                   "file_store_full");
  }
  const std::string id = absl::StrCat("file-", next_file_++);
  file_bytes_ += content.size();
  File& file = files_[id];
  file = File{.filename = filename.empty() ? "upload.jsonl" : filename,
              .purpose = purpose,
              .created_at = absl::ToUnixSeconds(absl::Now()),
              .content = std::move(content)};
  return JsonReply(200, FileJson(id, file));
}

HttpReply BatchApi::ListFiles() {
  absl::MutexLock lock(&mu_);
  Json data = Json::array();
  for (const auto& [id, file] : files_) data.push_back(FileJson(id, file));
  return JsonReply(200, Json{{"object", "list"}, {"data", std::move(data)}, {"has_more", false}});
}

HttpReply BatchApi::GetFile(const std::string& id) {
  {
    absl::MutexLock lock(&mu_);
    auto it = files_.find(id);
    if (it != files_.end()) return JsonReply(200, FileJson(id, it->second));
  }
  File file;
  HttpReply error;
  if (!BatchFile(id, file, error)) return error;
  return JsonReply(200, FileJson(id, file));
}

HttpReply BatchApi::FileContent(const std::string& id) {
  {
    absl::MutexLock lock(&mu_);
    auto it = files_.find(id);
    if (it != files_.end()) {
      return HttpReply{
          .status = 200, .body = it->second.content, .content_type = "application/jsonl"};
    }
  }
  File file;
  HttpReply error;
  if (!BatchFile(id, file, error)) return error;
  return HttpReply{
      .status = 200, .body = std::move(file.content), .content_type = "application/jsonl"};
}

HttpReply BatchApi::DeleteFile(const std::string& id) {
  absl::MutexLock lock(&mu_);
  auto it = files_.find(id);
  if (it == files_.end()) {
    if (absl::StartsWith(id, kOutputPrefix) || absl::StartsWith(id, kErrorsPrefix)) {
      return Invalid("file_id", "a batch's output files go with the batch");
    }
    return NotFound("file " + id, "file_id");
  }
  file_bytes_ -= it->second.content.size();
  files_.erase(it);
  return JsonReply(200, Json{{"id", id}, {"object", "file"}, {"deleted", true}});
}

bool BatchApi::BatchFile(const std::string& id, File& file, HttpReply& error) {
  const bool output = absl::StartsWith(id, kOutputPrefix);
  if (!output && !absl::StartsWith(id, kErrorsPrefix)) {
    error = NotFound("file " + id, "file_id");
    return false;
  }
  const std::string job_id =
      id.substr(output ? sizeof(kOutputPrefix) - 1 : sizeof(kErrorsPrefix) - 1);
  v1::BatchJob job;
  {
    grpc::ClientContext context;
    Prepare(context, "");
    v1::GetBatchJobRequest request;
    request.set_id(job_id);
    grpc::Status status = stub_.GetBatchJob(&context, request, &job);
    if (!status.ok() || !Terminal(job.status())) {
      error = NotFound("file " + id, "file_id");
      return false;
    }
  }
  const Endpoint endpoint = Label(job, kEndpointLabel) == kChatEndpoint ? Endpoint::kChatCompletions
                                                                        : Endpoint::kCompletions;
  const bool chat = endpoint == Endpoint::kChatCompletions;
  OpenAiRequest shape;
  shape.endpoint = endpoint;
  shape.calls.resize(1);

  grpc::ClientContext context;
  Prepare(context, "");
  v1::ReadBatchResultsRequest request;
  request.set_job_id(job_id);
  request.set_include_successes(output);
  request.set_include_errors(!output);
  std::unique_ptr<grpc::ClientReader<v1::BatchItemResult>> reader =
      stub_.ReadBatchResults(&context, request);
  v1::BatchItemResult result;
  std::string content;
  while (reader->Read(&result)) {
    const v1::BatchEvent::ItemResult& item = result.item();
    const std::string request_id = absl::StrCat(job_id, "-", result.cursor());
    Json line = {{"id", "batch_req_" + request_id}, {"custom_id", item.custom_id()}};
    if (item.has_result()) {
      if (!output) continue;
      // One choice per sample (the line's `n`), index = sample_index.
      shape.n = static_cast<uint32_t>(std::max(item.result().samples_size(), 1));
      ResponseBuilder builder(shape, absl::StrCat(chat ? "chatcmpl-" : "cmpl-", request_id),
                              job.created_at().seconds(), served_.name, token_bytes_);
      for (const v1::GenerateEvent::Final& sample : item.result().samples()) {
        v1::GenerateEvent event;
        event.mutable_accepted()->set_prompt_tokens(sample.usage().prompt_tokens());
        builder.OnEvent(0, event, nullptr);
        event.Clear();
        event.mutable_delta()->set_sample_index(sample.sample_index());
        event.mutable_delta()->set_text(sample.full_text());
        builder.OnEvent(0, event, nullptr);
        event.Clear();
        *event.mutable_final() = sample;
        builder.OnEvent(0, event, nullptr);
      }
      line["response"] = {
          {"status_code", 200}, {"request_id", request_id}, {"body", builder.Response()}};
      line["error"] = nullptr;
    } else {
      if (output) continue;
      const v1::ErrorStatus& e = item.error();
      if (e.code() == static_cast<int>(grpc::StatusCode::CANCELLED)) {
        line["response"] = nullptr;
        line["error"] = {{"code", job.status() == v1::BATCH_JOB_STATUS_EXPIRED ? "batch_expired"
                                                                               : "batch_cancelled"},
                         {"message", e.message()}};
      } else {
        const ApiError api = ToApiError(
            absl::Status(static_cast<absl::StatusCode>(e.code()), e.message()), endpoint);
        line["response"] = {
            {"status_code", api.http_status}, {"request_id", request_id}, {"body", ErrorBody(api)}};
        line["error"] = nullptr;
      }
    }
    absl::StrAppend(&content, Dump(line), "\n");
  }
  if (grpc::Status status = reader->Finish(); !status.ok()) {
    error = FromGrpc(status);
    return false;
  }
  file = File{.filename = absl::StrCat(job_id, output ? "_output.jsonl" : "_errors.jsonl"),
              .purpose = "batch_output",
              .created_at = job.has_completed_at() ? job.completed_at().seconds()
                                                   : absl::ToUnixSeconds(absl::Now()),
              .content = std::move(content)};
  return true;
}

Json BatchApi::BatchJson(const v1::BatchJob& job) const {
  Json metadata = Json::object();
  for (const auto& [key, value] : job.labels()) {
    if (absl::StartsWith(key, kMetadataPrefix)) {
      metadata[key.substr(sizeof(kMetadataPrefix) - 1)] = value;
    }
  }
  Json errors = nullptr;
  if (job.job_errors_size() > 0) {
    errors = {{"object", "list"}, {"data", Json::array()}};
    for (const v1::ErrorStatus& e : job.job_errors()) {
      errors["data"].push_back({{"code", e.reason().empty() ? "batch_failed" : e.reason()},
                                {"message", e.message()},
                                {"param", nullptr},
                                {"line", nullptr}});
    }
  }
  const v1::BatchJobCounts& counts = job.counts();
  const bool ended = Terminal(job.status());
  const uint32_t failed = counts.failed() + counts.cancelled();
  return Json{
      {"id", job.id()},
      {"object", "batch"},
      {"endpoint", Label(job, kEndpointLabel)},
      {"errors", errors},
      {"input_file_id", Label(job, kInputFileLabel)},
      {"completion_window", absl::StrCat(job.completion_window().seconds() / 3600, "h")},
      {"status", StatusName(job.status())},
      {"output_file_id",
       ended && counts.completed() > 0 ? Json(kOutputPrefix + job.id()) : Json(nullptr)},
      {"error_file_id", ended && failed > 0 ? Json(kErrorsPrefix + job.id()) : Json(nullptr)},
      {"created_at", job.created_at().seconds()},
      {"in_progress_at", Seconds(job.has_started_at(), job.started_at())},
      {"expires_at", Seconds(job.has_expires_at(), job.expires_at())},
      {"finalizing_at", Seconds(job.has_finalizing_at(), job.finalizing_at())},
      {"completed_at", Seconds(job.has_completed_at(), job.completed_at())},
      {"failed_at", Seconds(job.has_failed_at(), job.failed_at())},
      {"expired_at", Seconds(job.has_expired_at(), job.expired_at())},
      {"cancelling_at", Seconds(job.has_cancelling_at(), job.cancelling_at())},
      {"cancelled_at", Seconds(job.has_cancelled_at(), job.cancelled_at())},
      {"request_counts",
       {{"total", counts.total()}, {"completed", counts.completed()}, {"failed", failed}}},
      {"metadata", metadata}};
}

HttpReply BatchApi::CreateBatch(const std::string& text, const std::string& authorization) {
  const Json body = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded() || !body.is_object()) {
    return Invalid("", "The request body is not a JSON object", "invalid_json");
  }
  auto string_field = [&](const char* key) -> std::optional<std::string> {
    auto it = body.find(key);
    if (it == body.end() || !it->is_string()) return std::nullopt;
    return it->get<std::string>();
  };
  const std::optional<std::string> input_file_id = string_field("input_file_id");
  if (!input_file_id) return Invalid("input_file_id", "input_file_id (a string) is required");
  const std::optional<std::string> endpoint_name = string_field("endpoint");
  if (endpoint_name != kChatEndpoint && endpoint_name != kCompletionsEndpoint) {
    return Invalid("endpoint", "endpoint must be /v1/chat/completions or /v1/completions");
  }
  const Endpoint endpoint =
      *endpoint_name == kChatEndpoint ? Endpoint::kChatCompletions : Endpoint::kCompletions;
  int64_t hours = 24;
  if (auto it = body.find("completion_window"); it != body.end() && !it->is_null()) {
    const std::string window = it->is_string() ? it->get<std::string>() : "";
    if (!absl::EndsWith(window, "h") ||
        !absl::SimpleAtoi(window.substr(0, window.size() - 1), &hours) || hours < 1 ||
        hours > 168) {
      return Invalid("completion_window", "completion_window must be \"<N>h\" with N in 1..168");
    }
  }
  v1::CreateBatchJobRequest request;
  request.mutable_completion_window()->set_seconds(hours * 3600);
  (*request.mutable_labels())[kEndpointLabel] = *endpoint_name;
  (*request.mutable_labels())[kInputFileLabel] = *input_file_id;
  if (auto it = body.find("metadata"); it != body.end() && !it->is_null()) {
    if (!it->is_object() || it->size() > kMaxMetadata) {
      return Invalid("metadata", absl::StrCat("metadata must be an object of at most ",
                                              kMaxMetadata, " string values"));
    }
    for (const auto& [key, value] : it->items()) {
      if (!value.is_string() || key.empty() || key.size() > 55 ||
          value.get<std::string>().size() > 512) {
        return Invalid("metadata",
                       "metadata keys must be 1..55 bytes, values strings of at "
                       "most 512 bytes");
      }
      (*request.mutable_labels())[kMetadataPrefix + key] = value.get<std::string>();
    }
  }

  std::string content;
  {
    absl::MutexLock lock(&mu_);
    auto it = files_.find(*input_file_id);
    if (it == files_.end()) return NotFound("file " + *input_file_id, "input_file_id");
    if (it->second.purpose != "batch") {
      return Invalid("input_file_id", "the input file's purpose must be \"batch\"");
    }
    content = it->second.content;
  }
  std::set<std::string> custom_ids;
  int line_number = 0;
  for (absl::string_view raw : absl::StrSplit(content, '\n')) {
    ++line_number;
    const std::string line(absl::StripAsciiWhitespace(raw));
    if (line.empty()) continue;
    const std::string where = absl::StrCat("line ", line_number, ": ");
    const Json entry = Json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (entry.is_discarded() || !entry.is_object()) {
      return Invalid("input_file_id", where + "not a JSON object");
    }
    auto custom_id = entry.find("custom_id");
    if (custom_id == entry.end() || !custom_id->is_string() ||
        custom_id->get<std::string>().empty() || custom_id->get<std::string>().size() > 64) {
      return Invalid("input_file_id", where + "custom_id must be a string of 1..64 bytes");
    }
    if (!custom_ids.insert(custom_id->get<std::string>()).second) {
      return Invalid("input_file_id",
                     where + "duplicate custom_id \"" + custom_id->get<std::string>() + "\"");
    }
    auto method = entry.find("method");
    auto url = entry.find("url");
    if (method == entry.end() || *method != "POST" || url == entry.end() ||
        *url != *endpoint_name) {
      return Invalid("input_file_id",
                     where + "method must be POST and url the batch's endpoint " + *endpoint_name);
    }
    auto item_body = entry.find("body");
    if (item_body == entry.end() || !item_body->is_object()) {
      return Invalid("input_file_id", where + "body must be an object");
    }
    absl::StatusOr<OpenAiRequest> parsed = ParseOpenAiRequest(endpoint, *item_body, served_);
    if (!parsed.ok()) {
      const ApiError api = ToApiError(parsed.status(), endpoint);
      return ErrorReply(ApiError{.http_status = api.http_status,
                                 .type = api.type,
                                 .message = where + api.message,
                                 .param = api.param,
                                 .code = api.code});
    }
    if (parsed->calls.size() != 1 || parsed->stream || !parsed->echo.empty() ||
        parsed->logprobs.has_value()) {
      return Invalid("input_file_id",
                     where + "batch requests take one prompt, no stream, echo or logprobs");
    }
    v1::BatchItem* item = request.mutable_items()->add_items();
    item->set_custom_id(custom_id->get<std::string>());
    *item->mutable_request() = std::move(parsed->calls[0]);
    // Results carry the full text.
    item->mutable_request()->mutable_output()->set_stream_tokens(false);
  }
  if (request.items().items_size() == 0)
    return Invalid("input_file_id", "the file has no requests");

  grpc::ClientContext context;
  Prepare(context, authorization);
  v1::BatchJob job;
  if (grpc::Status status = stub_.CreateBatchJob(&context, request, &job); !status.ok()) {
    return FromGrpc(status);
  }
  return JsonReply(200, BatchJson(job));
}

HttpReply BatchApi::GetBatch(const std::string& id, const std::string& authorization) {
  grpc::ClientContext context;
  Prepare(context, authorization);
  v1::GetBatchJobRequest request;
  request.set_id(id);
  v1::BatchJob job;
  if (grpc::Status status = stub_.GetBatchJob(&context, request, &job); !status.ok()) {
    return FromGrpc(status);
  }
  return JsonReply(200, BatchJson(job));
}

HttpReply BatchApi::CancelBatch(const std::string& id, const std::string& authorization) {
  grpc::ClientContext context;
  Prepare(context, authorization);
  v1::CancelBatchJobRequest request;
  request.set_id(id);
  v1::BatchJob job;
  if (grpc::Status status = stub_.CancelBatchJob(&context, request, &job); !status.ok()) {
    return FromGrpc(status);
  }
  return JsonReply(200, BatchJson(job));
}

HttpReply BatchApi::ListBatches(const std::string& after, int limit,
                                const std::string& authorization) {
  if (limit < 1 || limit > 100) return Invalid("limit", "limit must be in 1..100");
  Json data = Json::array();
  bool skipping = !after.empty();
  bool has_more = false;
  std::string token;
  do {
    grpc::ClientContext context;
    Prepare(context, authorization);
    v1::ListBatchJobsRequest request;
    request.set_page_size(100);
    request.set_page_token(token);
    v1::ListBatchJobsResponse page;
    if (grpc::Status status = stub_.ListBatchJobs(&context, request, &page); !status.ok()) {
      return FromGrpc(status);
    }
    for (const v1::BatchJob& job : page.jobs()) {
      if (skipping) {
        skipping = job.id() != after;
        continue;
      }
      if (static_cast<int>(data.size()) == limit) {
        has_more = true;
        break;
      }
      data.push_back(BatchJson(job));
    }
    token = page.next_page_token();
  } while (!has_more && !token.empty());
  Json out = {{"object", "list"}, {"data", data}, {"has_more", has_more}};
  out["first_id"] = data.empty() ? Json(nullptr) : data.front()["id"];
  out["last_id"] = data.empty() ? Json(nullptr) : data.back()["id"];
  return JsonReply(200, out);
}

}  // namespace weir::coordinator::http
