// coordinator/http/batch_api.h
//
// BatchApi serves OpenAI's Files and Batch APIs over weir.v1.BatchJobs (the
// coordinator's own service, reached through the in-process channel):
//
//   POST   /v1/files                  multipart upload (purpose "batch" only)
//   GET    /v1/files, /v1/files/{id}, /v1/files/{id}/content;  DELETE /v1/files/{id}
//   POST   /v1/batches                {input_file_id, endpoint, completion_window, metadata}
//   GET    /v1/batches, /v1/batches/{id};  POST /v1/batches/{id}/cancel
//
// Decisions:
// * Uploaded files live in coordinator memory (at most `max_files` files and
//   `max_file_bytes` bytes in all), like batch jobs; nothing survives a restart.
// * Creating a batch validates the whole input file synchronously: every line
//   must be {"custom_id", "method": "POST", "url": <the batch's endpoint>,
//   "body"} with a body that ParseOpenAiRequest accepts, one prompt, no
//   stream, no echo (`n` up to the served maximum: the item's samples);
//   custom ids unique. A bad line is 400 naming the line (and
//   no batch), where OpenAI would create a batch that fails in validation.
// * The batch id is the BatchJob id. Status: QUEUED and IN_PROGRESS ->
//   "in_progress", FINALIZING, COMPLETED, FAILED, EXPIRED, CANCELLING,
//   CANCELLED -> their names. request_counts.failed counts failed, cancelled
//   and expired items. completion_window is "<N>h", 1..168.
// * Once a batch has ended, output_file_id ("file-output-<batch>": one line
//   per successful item, {"id", "custom_id", "response": {"status_code": 200,
//   "request_id", "body": <the completion, one choice per sample of the
//   line's `n`>}, "error": null}) and
//   error_file_id ("file-errors-<batch>": per failed item the error response,
//   or for cancelled / expired items "response": null and "error") are set
//   when they would not be empty. Their contents are read from the job's
//   results (ReadBatchResults) when asked for, while the job is kept.
// * metadata: at most 14 string pairs (BatchJob labels).
//
// Thread safety: thread-safe (the file store has its own mutex).

#ifndef WEIR_COORDINATOR_HTTP_BATCH_API_H_
#define WEIR_COORDINATOR_HTTP_BATCH_API_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "absl/synchronization/mutex.h"
#include "coordinator/http/openai_request.h"
#include "coordinator/http/openai_response.h"
#include "proto/batch.grpc.pb.h"

namespace weir::coordinator::http {

// A response: status, body and its content type.
struct HttpReply {
  int status = 200;
  std::string body;
  std::string content_type = "application/json";
};

struct BatchApiOptions {
  size_t max_files = 1000;
  size_t max_file_bytes = size_t{256} << 20;
};

class BatchApi {
 public:
  // `stub` (the BatchJobs service) and `served` must outlive the API.
  BatchApi(v1::BatchJobs::Stub& stub, const ServedModel& served, TokenBytes token_bytes,
           BatchApiOptions options = {});

  HttpReply UploadFile(const std::string& filename, const std::string& purpose,
                       std::string content);
  HttpReply ListFiles();
  HttpReply GetFile(const std::string& id);
  HttpReply FileContent(const std::string& id);
  HttpReply DeleteFile(const std::string& id);

  // `authorization` is passed on as gRPC metadata (may be empty).
  HttpReply CreateBatch(const std::string& body, const std::string& authorization);
  HttpReply GetBatch(const std::string& id, const std::string& authorization);
  HttpReply CancelBatch(const std::string& id, const std::string& authorization);
  // Newest first; `after` (a batch id, may be empty) and `limit` (1..100) page.
  HttpReply ListBatches(const std::string& after, int limit, const std::string& authorization);

 private:
  struct File {
    std::string filename;
    std::string purpose;
    int64_t created_at = 0;
    std::string content;
  };

  Json FileJson(const std::string& id, const File& file) const;
  Json BatchJson(const v1::BatchJob& job) const;
  // The generated output or error file of a batch ("file-output-<id>" /
  // "file-errors-<id>"): false if `id` names none.
  bool BatchFile(const std::string& id, File& file, HttpReply& error);

  v1::BatchJobs::Stub& stub_;
  const ServedModel& served_;
  const TokenBytes token_bytes_;
  const BatchApiOptions options_;
  absl::Mutex mu_;
  std::map<std::string, File> files_ ABSL_GUARDED_BY(mu_);
  size_t file_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t next_file_ ABSL_GUARDED_BY(mu_) = 1;
};

}  // namespace weir::coordinator::http

#endif  // WEIR_COORDINATOR_HTTP_BATCH_API_H_
