// tools/bench/serve_stats.h
//
// What the serving benchmark measures per request (RequestRecord) and how a
// load level is summarised: throughput, TTFT / inter-token / end-to-end
// latency percentiles, and the per-sequence decode rate.
//
// Thread safety: free functions and plain structs; not synchronised.

#ifndef WEIR_TOOLS_BENCH_SERVE_STATS_H_
#define WEIR_TOOLS_BENCH_SERVE_STATS_H_

#include <cstdint>
#include <string>
#include <vector>

namespace weir::bench {

// One request as the client saw it. Times are in milliseconds.
struct RequestRecord {
  bool ok = false;
  // Why the request failed (gRPC status or a protocol problem); empty if ok.
  std::string error;
  // Send time, from the start of the level.
  double start_ms = 0;
  // Send -> first Delta that carries tokens.
  double ttft_ms = 0;
  // Send -> end of the stream.
  double e2e_ms = 0;
  // Gaps between token arrivals after the first; a Delta carrying k tokens
  // after a gap g contributes k gaps of g/k.
  std::vector<double> itl_ms;
  uint32_t prompt_tokens = 0;
  uint32_t output_tokens = 0;
};

// Returns the q-quantile (0 <= q <= 1) of `values` by the nearest-rank method
// (the smallest value with at least q of the values <= it); 0 if empty.
double Percentile(std::vector<double> values, double q);

struct LevelSummary {
  int requests = 0;
  int failed = 0;
  // First send -> last completion.
  double wall_s = 0;
  double requests_per_s = 0;
  double output_tokens_per_s = 0;
  int64_t output_tokens = 0;
  double ttft_p50 = 0, ttft_p90 = 0, ttft_p99 = 0;
  double itl_p50 = 0, itl_p90 = 0, itl_p99 = 0;
  double e2e_p50 = 0, e2e_p99 = 0;
  // Tokens after the first per second of decoding, per sequence: the sum of
  // (output_tokens - 1) over the sum of (e2e - ttft), successful requests only.
  double decode_tokens_per_s_per_seq = 0;
  // The first error seen, for the report; empty if none failed.
  std::string first_error;
};

// Summarises the records of one level that took `wall_s` seconds.
LevelSummary Summarize(const std::vector<RequestRecord>& records, double wall_s);

// The per-request CSV the benchmarks write (--csv) and tools/bench/plot.py
// reads: the header line, and one line for `record` of level `level`
// (concurrency, or 0 for an open-loop level). itl_mean_ms / itl_max_ms are
// over the request's inter-token gaps (0 without any). Both end with "\n".
std::string CsvHeader();
std::string CsvRow(const std::string& level, int concurrency, const RequestRecord& record);

}  // namespace weir::bench

#endif  // WEIR_TOOLS_BENCH_SERVE_STATS_H_
