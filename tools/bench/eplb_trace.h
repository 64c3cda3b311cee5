// tools/bench/eplb_trace.h
//
// Synthetic MoE routing traces for the EPLB benchmark: per-layer Zipf-skewed
// expert popularity whose order drifts slowly from window to window, groups of
// experts that are hot together (a shared log-normal activity factor that
// follows an AR(1) process over windows: topics come and go), and Poisson
// sampling noise on the token counts.
//
// Thread safety: pure function; safe to call concurrently.

#ifndef WEIR_TOOLS_BENCH_EPLB_TRACE_H_
#define WEIR_TOOLS_BENCH_EPLB_TRACE_H_

#include <cstdint>
#include <vector>

namespace weir::bench {

struct TraceOptions {
  int num_windows = 120;
  int num_layers = 40;
  int num_experts = 384;
  int top_k = 6;
  int64_t tokens_per_window = 128 * 256;  // stat_interval steps x tokens per step.
  double zipf_exponent = 0.9;             // Popularity of the r-th expert ~ 1 / (r + 1)^s.
  double drift_swaps = 0.005;             // Adjacent popularity swaps per window, per expert.
  int group_size = 4;                     // Experts that are hot together.
  double burst_sigma = 0.3;               // Log-normal sigma of a group's activity factor.
  double burst_corr = 0.995;              // Window-to-window correlation of that factor.
  uint64_t seed = 1;
};

// Returns token counts [num_windows, num_layers, num_experts], row-major.
// Deterministic for a given `options` (and standard library).
std::vector<int64_t> GenerateTrace(const TraceOptions& options);

}  // namespace weir::bench

#endif  // WEIR_TOOLS_BENCH_EPLB_TRACE_H_
