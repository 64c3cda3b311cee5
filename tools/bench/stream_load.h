// tools/bench/stream_load.h
//
// A client that holds thousands of concurrent Generate streams without a
// thread per stream (gRPC's callback API, spread over several channels), and
// a sampler that watches the coordinator meanwhile: health of the public and
// the control-plane server (status and latency), its thread count and RSS
// from /proc. The load test (tests/load_test) and the stream benchmark
// (tools/bench:streams) share it.
//
//   StreamLoadOptions load{.address = cluster.address(), .streams = 1000};
//   LoadSampler sampler({.public_address = ..., .control_address = ..., .pid = pid});
//   StreamLoadReport report = RunStreamLoad(load);
//   SamplerReport watched = sampler.Stop();
//
// Thread safety: RunStreamLoad may be called from any thread (it blocks until
// every stream ended); a LoadSampler is owned by one thread.

#ifndef WEIR_TOOLS_BENCH_STREAM_LOAD_H_
#define WEIR_TOOLS_BENCH_STREAM_LOAD_H_

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/support/status.h"

namespace weir::bench {

struct StreamLoadOptions {
  std::string address;
  // Generate calls started at once.
  int streams = 1000;
  // Client channels (TCP connections) the streams are spread over; 0 = one
  // per 500 streams (the server allows 1,024 concurrent streams on one).
  int channels = 0;
  // Each call: `prompt_tokens` token ids (varied per stream), greedy,
  // ignore_eos, `max_new_tokens` tokens, streamed as deltas.
  uint32_t prompt_tokens = 8;
  uint32_t max_new_tokens = 8;
  // Deadline of every call.
  absl::Duration deadline = absl::Minutes(10);
  // "authorization: Bearer <key>" on every call when not empty.
  std::string api_key;
};

struct StreamLoadReport {
  int streams = 0;
  int ok = 0;
  int resource_exhausted = 0;
  // Calls that ended otherwise, by status code name; and one message of each.
  std::map<std::string, int> other;
  std::map<std::string, std::string> other_example;
  // RESOURCE_EXHAUSTED answers that carried a google.rpc.RetryInfo.
  int retry_hints = 0;
  // Completion tokens of the OK calls (their Final usage), and tokens seen in
  // deltas of every call.
  uint64_t tokens = 0;
  absl::Duration wall;
  // End-to-end latency of the OK calls (start to status) and their time to
  // the first token, in milliseconds.
  double p50_ms = 0, p99_ms = 0, max_ms = 0;
  double ttft_p50_ms = 0, ttft_p99_ms = 0;
  double tokens_per_second() const;
};

// Starts `options.streams` Generate calls at once and waits for all of them.
StreamLoadReport RunStreamLoad(const StreamLoadOptions& options);

struct SamplerOptions {
  std::string public_address;
  // The control-plane server (empty: not checked).
  std::string control_address;
  // The coordinator process (threads, RSS); 0: not read.
  pid_t pid = 0;
  absl::Duration interval = absl::Milliseconds(200);
  // Deadline of each health check.
  absl::Duration health_deadline = absl::Seconds(5);
};

struct HealthSeries {
  int checks = 0;
  // Checks that did not answer SERVING (error, timeout, NOT_SERVING), and the
  // first such answer.
  int not_serving = 0;
  std::string first_failure;
  double p50_ms = 0, p99_ms = 0, max_ms = 0;
};

struct SamplerReport {
  HealthSeries public_health;   // weir.v1.Inference on the public server
  HealthSeries control_health;  // weir.v1.Coordinator on the control plane
  int max_threads = 0;
  int64_t max_rss_kb = 0;
};

// Polls health on both servers and the coordinator's /proc every interval,
// on one thread of its own, until Stop.
class LoadSampler {
 public:
  explicit LoadSampler(SamplerOptions options);
  ~LoadSampler();
  SamplerReport Stop();

 private:
  void Loop();

  const SamplerOptions options_;
  absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<double> public_ms_, control_ms_;  // only the sampler thread
  SamplerReport report_;
  std::thread thread_;
};

// Threads and VmRSS (kB) of process `pid` from /proc/<pid>/status; {-1, -1}
// if it cannot be read.
std::pair<int, int64_t> ProcessThreadsAndRss(pid_t pid);

// The --coordinator address a child of `pid` was started with (a local
// worker's or EPLB's: the control plane), or "" if none is found.
std::string ControlAddressOfChildren(pid_t pid);

// The q-quantile (0..1) of `values` (sorted in place); 0 if empty.
double Quantile(std::vector<double>& values, double q);

}  // namespace weir::bench

#endif  // WEIR_TOOLS_BENCH_STREAM_LOAD_H_
