// coordinator/http/metrics.h
//
// Metrics is the coordinator's Prometheus registry: request counters and
// latency histograms fed at the points where requests finish (the gRPC
// interceptor in metrics_interceptor.h sees every Generate and GenerateBatch,
// including the HTTP server's in-process calls), HTTP request counts, and
// gauges read from GetServerState at scrape time. Render writes the text
// exposition format 0.0.4 (what GET /metrics serves). No Debian package of a
// C++ Prometheus client exists (libprometheus-cpp is not in Debian 12), so
// the format is written here; it is small.
//
// Label values come from closed sets (status codes, finish reasons, worker
// states, ranks, HTTP routes), never from request data.
//
// Thread safety: thread-safe; one mutex, held only to update or copy numbers.

#ifndef WEIR_COORDINATOR_HTTP_METRICS_H_
#define WEIR_COORDINATOR_HTTP_METRICS_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "proto/inference.pb.h"

namespace weir::coordinator::http {

// A cumulative histogram with fixed upper bounds (seconds).
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  // Records `count` observations of `value`.
  void Observe(double value, uint64_t count = 1);
  // Appends `name`'s _bucket, _sum and _count samples.
  void Render(absl::string_view name, std::string& out) const;
  uint64_t count() const { return count_; }

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> buckets_;  // per bound, not cumulative; last = +Inf
  double sum_ = 0;
  uint64_t count_ = 0;
};

class Metrics {
 public:
  Metrics();

  // A Generate / GenerateBatch call ended with gRPC status `code` (its name,
  // e.g. "OK", "RESOURCE_EXHAUSTED").
  void CountCall(absl::string_view method, absl::string_view code);
  // One sample (or batch item sample) finished with `reason` (the proto
  // enum's name without the FINISH_REASON_ prefix, lower case).
  void CountFinish(absl::string_view reason);
  // A batch item failed with `code`.
  void CountItemError(absl::string_view code);
  // `accepted_draft_tokens`: how many of the generation tokens were
  // accepted DSpark drafts (Usage.accepted_draft_tokens); `rejected`: the
  // drafts verification rejected (Usage.rejected_draft_tokens).
  void AddTokens(uint64_t prompt_tokens, uint64_t generation_tokens,
                 uint64_t accepted_draft_tokens = 0, uint64_t rejected_draft_tokens = 0);
  void ObserveTimeToFirstToken(double seconds);
  void ObserveInterToken(double seconds, uint64_t count);
  void ObserveEndToEnd(double seconds);
  // An HTTP request to `route` (one of the server's routes, or "other")
  // answered `status`.
  void CountHttp(absl::string_view route, int status);

  // Returns every metric in the text exposition format; with `state`, also
  // the load and lifecycle gauges of GetServerState.
  std::string Render(const v1::ServerState* state) const;

 private:
  mutable absl::Mutex mu_;
  // Guarded by mu_; keys are label values.
  std::map<std::pair<std::string, std::string>, uint64_t> calls_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, uint64_t> finishes_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, uint64_t> item_errors_ ABSL_GUARDED_BY(mu_);
  std::map<std::pair<std::string, int>, uint64_t> http_ ABSL_GUARDED_BY(mu_);
  uint64_t prompt_tokens_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t generation_tokens_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t accepted_draft_tokens_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t rejected_draft_tokens_ ABSL_GUARDED_BY(mu_) = 0;
  Histogram ttft_ ABSL_GUARDED_BY(mu_);
  Histogram inter_token_ ABSL_GUARDED_BY(mu_);
  Histogram end_to_end_ ABSL_GUARDED_BY(mu_);
};

// Escapes a label value for the text format (backslash, quote, newline).
std::string EscapeLabel(absl::string_view value);

}  // namespace weir::coordinator::http

#endif  // WEIR_COORDINATOR_HTTP_METRICS_H_
