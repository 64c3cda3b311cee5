// eplb/load_reporter.h
//
// LoadReporter streams a worker's expert load (taken every `stat_interval`
// steps, when the step plan asks) to the EPLB service over one ReportLoad
// client stream. The worker's step thread only enqueues; a thread of its own
// writes, so a slow or absent EPLB never stalls a step: when the bounded queue is full a report
// is dropped, and a broken stream is reopened on the next report.
//
// Thread safety: Enqueue is thread-safe; the writer runs on its own thread.

#ifndef WEIR_EPLB_LOAD_REPORTER_H_
#define WEIR_EPLB_LOAD_REPORTER_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "proto/eplb.grpc.pb.h"

namespace weir::eplb {

class LoadReporter {
 public:
  static constexpr size_t kMaxQueued = 256;

  explicit LoadReporter(const std::string& eplb_address);
  // Flushes nothing further, closes the stream and joins the writer.
  ~LoadReporter();

  // Queues rank `rank`'s counts [num_layers, num_logical] of step `step_id`,
  // made under expert map `map_version`, with the rows its experts computed
  // per layer (`served` [num_layers]). Drops the report (and counts it) if
  // kMaxQueued reports are waiting.
  void Enqueue(int rank, uint64_t step_id, int num_layers, int num_logical,
               std::vector<uint64_t> counts, uint64_t map_version = 0,
               std::vector<uint64_t> served = {});

  uint64_t sent() const;
  uint64_t dropped() const;

 private:
  void Loop();

  const std::string address_;
  mutable absl::Mutex mu_;
  // Guarded by mu_.
  std::deque<v1::LoadReport> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // The open stream's context, cancelled at destruction so a stuck write ends.
  grpc::ClientContext* active_context_ ABSL_GUARDED_BY(mu_) = nullptr;
  uint64_t sent_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t dropped_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread writer_;
};

}  // namespace weir::eplb

#endif  // WEIR_EPLB_LOAD_REPORTER_H_
