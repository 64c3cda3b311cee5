// tools/bench/serve_workload.h
//
// The requests of the serving benchmark: token-id prompts of random lengths,
// random output lengths, and Poisson arrival times, all drawn from a fixed
// seed so every run (and every build on the same standard library) sends the
// same load.
//
// Thread safety: free functions, thread-safe.

#ifndef WEIR_TOOLS_BENCH_SERVE_WORKLOAD_H_
#define WEIR_TOOLS_BENCH_SERVE_WORKLOAD_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"

namespace weir::bench {

struct WorkloadOptions {
  // Prompt lengths are uniform in [min_prompt_tokens, max_prompt_tokens].
  int min_prompt_tokens = 16;
  int max_prompt_tokens = 128;
  // max_new_tokens of each request, uniform in [min_output_tokens, max_output_tokens].
  int min_output_tokens = 32;
  int max_output_tokens = 64;
  // Prompt token ids are uniform in [0, vocab_size) minus `excluded_ids`
  // (EOS, BOS, padding: ids that would make the model stop or that a server
  // may treat specially).
  uint32_t vocab_size = 0;
  std::vector<uint32_t> excluded_ids;
  uint64_t seed = 1;
};

struct RequestSpec {
  std::vector<uint32_t> prompt;
  uint32_t max_new_tokens = 0;
};

// Returns `count` requests for load level `level`: the same (options, level,
// count) always gives the same requests, and different levels draw different
// prompts (so a prefix cache cannot serve one level from an earlier one).
// Returns INVALID_ARGUMENT if a range is empty or negative, the vocabulary is
// empty, or every id is excluded.
absl::StatusOr<std::vector<RequestSpec>> MakeRequests(const WorkloadOptions& options,
                                                      int level, int count);

// Returns `count` arrival offsets in seconds, increasing from the first gap:
// a Poisson process of `rate_per_s` requests per second (exponential gaps),
// seeded by (seed, level). Returns INVALID_ARGUMENT unless rate_per_s > 0.
absl::StatusOr<std::vector<double>> PoissonArrivals(double rate_per_s, uint64_t seed, int level,
                                                    int count);

}  // namespace weir::bench

#endif  // WEIR_TOOLS_BENCH_SERVE_WORKLOAD_H_
