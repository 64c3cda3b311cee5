#include "tools/bench/serve_stats.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_format.h"

namespace weir::bench {

double Percentile(std::vector<double> values, double q) {
  if (values.empty()) return 0;
  q = std::clamp(q, 0.0, 1.0);
  // Nearest rank: ceil(q * n), 1-based, at least 1.
  size_t rank = static_cast<size_t>(std::ceil(q * static_cast<double>(values.size())));
  rank = std::clamp<size_t>(rank, 1, values.size());
  std::nth_element(values.begin(), values.begin() + (rank - 1), values.end());
  return values[rank - 1];
}

LevelSummary Summarize(const std::vector<RequestRecord>& records, double wall_s) {
  LevelSummary s;
  s.requests = static_cast<int>(records.size());
  s.wall_s = wall_s;
  std::vector<double> ttft, itl, e2e;
  double decode_tokens = 0, decode_ms = 0;
  for (const RequestRecord& r : records) {
    if (!r.ok) {
      ++s.failed;
      if (s.first_error.empty()) s.first_error = r.error;
      continue;
    }
    s.output_tokens += r.output_tokens;
    ttft.push_back(r.ttft_ms);
    e2e.push_back(r.e2e_ms);
    itl.insert(itl.end(), r.itl_ms.begin(), r.itl_ms.end());
    if (r.output_tokens > 1) {
      decode_tokens += r.output_tokens - 1;
      decode_ms += r.e2e_ms - r.ttft_ms;
    }
  }
  if (wall_s > 0) {
    s.requests_per_s = (s.requests - s.failed) / wall_s;
    s.output_tokens_per_s = static_cast<double>(s.output_tokens) / wall_s;
  }
  s.ttft_p50 = Percentile(ttft, 0.5);
  s.ttft_p90 = Percentile(ttft, 0.9);
  s.ttft_p99 = Percentile(ttft, 0.99);
  s.itl_p50 = Percentile(itl, 0.5);
  s.itl_p90 = Percentile(itl, 0.9);
  s.itl_p99 = Percentile(itl, 0.99);
  s.e2e_p50 = Percentile(e2e, 0.5);
  s.e2e_p99 = Percentile(e2e, 0.99);
  if (decode_ms > 0) s.decode_tokens_per_s_per_seq = decode_tokens / (decode_ms / 1000.0);
  return s;
}

std::string CsvHeader() {
  return "level,concurrency,ok,start_ms,ttft_ms,e2e_ms,prompt_tokens,output_tokens,"
         "itl_mean_ms,itl_max_ms\n";
}

std::string CsvRow(const std::string& level, int concurrency, const RequestRecord& record) {
  double sum = 0, max = 0;
  for (double v : record.itl_ms) {
    sum += v;
    max = std::max(max, v);
  }
  const double mean = record.itl_ms.empty() ? 0 : sum / static_cast<double>(record.itl_ms.size());
  return absl::StrFormat("%s,%d,%d,%.3f,%.3f,%.3f,%u,%u,%.3f,%.3f\n", level, concurrency,
                         record.ok ? 1 : 0, record.start_ms, record.ttft_ms, record.e2e_ms,
                         record.prompt_tokens, record.output_tokens, mean, max);
}

}  // namespace weir::bench
