// coordinator/batch_jobs_service.h
//
// BatchJobsService implements weir.v1.BatchJobs: asynchronous batch jobs in
// the manner of the OpenAI Batch API. A job's items run in the background on
// the service's job threads (at most `max_concurrent_jobs` jobs at once, the
// rest wait QUEUED in creation order); each item goes through the same path
// as a GenerateBatch item (defaults merged by MergeItem, BuildRequest, the
// StepDriver, a GenerationTracker), admitted gradually.
//
// API decisions:
// * CreateBatchJob validates synchronously, so a job is visible from QUEUED
//   on (VALIDATING is never observed): no items, too many items, a custom_id
//   not 1..64 bytes or duplicated, bad labels (<= 16, key 1..64 bytes, value
//   <= 512 bytes), a completion_window outside [1 s, 7 days], an input_uri
//   that is not `file://<absolute path>`, an unreadable file or a malformed
//   JSON Lines file (format of jsonl_batch.h) -> INVALID_ARGUMENT, and no job.
//   File inputs are read only from under `input_root` (FAILED_PRECONDITION
//   when it is unset, PERMISSION_DENIED for a path outside it).
//   Per-item problems (bad token id, prompt too long, unknown model, bad
//   sampling) are failed results of the running job, as in GenerateBatch.
// * An item with num_samples n runs n sequences as Generate does (SampleSet:
//   sample i seeded seed + i, samples 1.. forking sample 0's prefill); its
//   result holds the n Finals by sample_index; one failing sample fails the
//   item. It takes n of the in-flight sequences below.
//   UNAVAILABLE while the server is not ready.
// * idempotency_key: the same key with an identical request returns the
//   existing job (whatever its state, while it is kept); the same key with a
//   different request is ALREADY_EXISTS. For input_uri the request (the URI)
//   is compared, not the file's contents.
// * completion_window defaults to 24 h. A job not finished by expires_at
//   goes EXPIRED: in-flight items are cancelled in the driver, unfinished
//   items get a CANCELLED result, finished results are kept.
// * priority_class: BATCH (default) jobs keep at most
//   `batch_max_in_flight` sequences in the step loop at once, so interactive
//   Generate traffic always finds room; INTERACTIVE jobs may use
//   `interactive_max_in_flight` (GenerateBatch's bound). The step loop itself
//   has no priorities. RESOURCE_EXHAUSTED from the driver's admission limits
//   is not an item failure: the job retries the item a little later.
// * States: QUEUED -> IN_PROGRESS -> FINALIZING -> COMPLETED, or -> EXPIRED,
//   or CANCELLING -> CANCELLED (a QUEUED job is CANCELLED at once), or
//   FAILED when the step loop became unavailable (job_errors says why;
//   unfinished items are cancelled). Every state change sets its timestamp.
// * Every item gets exactly one result. Results are a log in completion
//   order; result i has cursor i and results_cursor_end is the log's length.
//   A successful item has `result` (GenerateResult with the full output);
//   a failed, cancelled or expired one has `error` (CANCELLED for the last
//   two). counts: completed = results, failed = non-CANCELLED errors,
//   cancelled = CANCELLED errors.
// * ReadBatchResults streams the log from `cursor`, waits for new results
//   while the job runs, and ends OK once the job is terminal and everything
//   was sent. include_successes / include_errors filter (both false = both
//   true: the proto3 defaults read everything). A cursor past the end of a
//   terminal job's log is OUT_OF_RANGE.
// * Cancelling a terminal job returns it unchanged (idempotent).
// * ListBatchJobs: newest first, page_size default 20, at most 100; the
//   page_token is opaque (INVALID_ARGUMENT if malformed).
// * A terminal job and its results are kept in memory for `result_ttl`
//   (default 24 h) after it ended, then dropped (NOT_FOUND afterwards). Nothing
//   survives a restart of the coordinator.
// * Unknown ids are NOT_FOUND.
//
// Thread safety: all methods are thread-safe. Job threads run until Stop().

#ifndef WEIR_COORDINATOR_BATCH_JOBS_SERVICE_H_
#define WEIR_COORDINATOR_BATCH_JOBS_SERVICE_H_

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "coordinator/generation_tracker.h"
#include "coordinator/request_builder.h"
#include "proto/batch.grpc.pb.h"
#include "tokenizer/tokenizer.h"

namespace weir::coordinator {

class InferenceService;

// What a batch job needs to run items. Implemented over InferenceService in
// production and by fakes in tests. Thread safety: thread-safe.
class BatchItemBackend {
 public:
  virtual ~BatchItemBackend() = default;
  // UNAVAILABLE while items cannot run (no step loop).
  virtual absl::Status Ready() const = 0;
  virtual uint32_t max_batch_items() const = 0;
  // Checks the model and builds `request` (defaults already merged) with the
  // current limits. Errors are per-item.
  virtual absl::StatusOr<BuiltRequest> Build(const v1::GenerateRequest& request) = 0;
  // May be null.
  virtual const tokenizer::Tokenizer* tokenizer() const = 0;
  virtual RequestId NextId() = 0;
  // As StepDriver::SubmitGroup (all or none; an item's samples go as one
  // group) / Cancel (the submissions' sinks feed the job's event queue).
  virtual absl::Status SubmitGroup(std::vector<SeqSubmission> group) = 0;
  virtual absl::Status Cancel(RequestId id) = 0;
};

// The backend over the service's step loop, limits and tokenizer. Does not
// take ownership; `service` must outlive it.
std::unique_ptr<BatchItemBackend> MakeInferenceBackend(InferenceService& service);

struct BatchJobsOptions {
  int max_concurrent_jobs = 2;
  int batch_max_in_flight = 16;
  int interactive_max_in_flight = 64;
  absl::Duration result_ttl = absl::Hours(24);
  absl::Duration default_completion_window = absl::Hours(24);
  // How long a cancelled or expired job waits for its in-flight items to
  // acknowledge the cancellation before it gives up on them.
  absl::Duration cancel_grace = absl::Seconds(10);
  // Directory `file://` inputs must lie in (after resolving symlinks and
  // ".."); empty = file inputs are refused, so a client cannot make the
  // server read arbitrary files.
  std::string input_root;
};

class BatchJobsService final : public v1::BatchJobs::Service {
 public:
  // Starts the job threads. Does not take ownership; `backend` must outlive
  // the service (or Stop()).
  BatchJobsService(BatchItemBackend& backend, BatchJobsOptions options);
  ~BatchJobsService() override;

  // Ends every unfinished job as FAILED (UNAVAILABLE: the server is
  // stopping), cancelling its in-flight items, and joins the job threads.
  // Call before the step loop stops. Idempotent.
  void Stop();

  grpc::Status CreateBatchJob(grpc::ServerContext* context,
                              const v1::CreateBatchJobRequest* request,
                              v1::BatchJob* response) override;
  grpc::Status GetBatchJob(grpc::ServerContext* context, const v1::GetBatchJobRequest* request,
                           v1::BatchJob* response) override;
  grpc::Status ListBatchJobs(grpc::ServerContext* context,
                             const v1::ListBatchJobsRequest* request,
                             v1::ListBatchJobsResponse* response) override;
  grpc::Status CancelBatchJob(grpc::ServerContext* context,
                              const v1::CancelBatchJobRequest* request,
                              v1::BatchJob* response) override;
  grpc::Status ReadBatchResults(grpc::ServerContext* context,
                                const v1::ReadBatchResultsRequest* request,
                                grpc::ServerWriter<v1::BatchItemResult>* writer) override;

  // ReadBatchResults without gRPC: looks at up to `max` results of `job_id`
  // from `cursor` and appends those that pass the filters to `out`; `next`
  // is the cursor after the last one looked at. `finished` is true when the
  // job had ended and `next` is the end of its log (nothing more will come).
  // NOT_FOUND for an unknown job, OUT_OF_RANGE for a cursor past the end of
  // an ended job's log.
  absl::Status ReadResults(const std::string& job_id, uint64_t cursor, bool include_successes,
                           bool include_errors, size_t max,
                           std::vector<v1::BatchItemResult>& out, uint64_t& next,
                           bool& finished);
  // Waits up to `timeout` for `job_id` to get results past `cursor` or end.
  void WaitForResults(const std::string& job_id, uint64_t cursor, absl::Duration timeout);

 private:
  struct Job;

  absl::StatusOr<std::vector<v1::BatchItem>> LoadItems(const v1::CreateBatchJobRequest& request);
  void JobThread();
  void RunJob(Job& job);
  // Appends one result to the job's log and updates its counts.
  void AddResult(Job& job, v1::BatchEvent::ItemResult result);
  void AddResultLocked(Job& job, v1::BatchEvent::ItemResult result)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SetStatus(Job& job, v1::BatchJobStatus status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ExpireQueued(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Purge(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::shared_ptr<Job> Find(const std::string& id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends a job that never ran: every item gets a CANCELLED result.
  void EndUnstarted(Job& job, v1::BatchJobStatus status, const std::string& why)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  BatchItemBackend& backend_;
  const BatchJobsOptions options_;
  absl::Mutex mu_;
  absl::CondVar changed_;  // a job got results or changed state
  absl::flat_hash_map<std::string, std::shared_ptr<Job>> jobs_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, std::string> by_key_ ABSL_GUARDED_BY(mu_);
  // Creation sequence -> id, for newest-first listing.
  std::map<uint64_t, std::string> by_seq_ ABSL_GUARDED_BY(mu_);
  std::deque<std::shared_ptr<Job>> queue_ ABSL_GUARDED_BY(mu_);
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_) = 1;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace weir::coordinator

#endif  // WEIR_COORDINATOR_BATCH_JOBS_SERVICE_H_
