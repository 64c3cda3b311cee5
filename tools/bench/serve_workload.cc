#include "tools/bench/serve_workload.h"

#include <algorithm>
#include <random>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace weir::bench {
namespace {

// One stream per (seed, level): levels never share prompts.
std::mt19937_64 Generator(uint64_t seed, int level) {
  std::seed_seq seq{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32),
                    static_cast<uint32_t>(level), 0x5e12e5u};
  return std::mt19937_64(seq);
}

}  // namespace

absl::StatusOr<std::vector<RequestSpec>> MakeRequests(const WorkloadOptions& options,
                                                      int level, int count) {
  if (count < 0) return absl::InvalidArgumentError("negative request count");
  if (options.min_prompt_tokens < 1 || options.max_prompt_tokens < options.min_prompt_tokens) {
    return absl::InvalidArgumentError(absl::StrCat("bad prompt length range [",
                                                   options.min_prompt_tokens, ", ",
                                                   options.max_prompt_tokens, "]"));
  }
  if (options.min_output_tokens < 1 || options.max_output_tokens < options.min_output_tokens) {
    return absl::InvalidArgumentError(absl::StrCat("bad output length range [",
                                                   options.min_output_tokens, ", ",
                                                   options.max_output_tokens, "]"));
  }
  std::vector<uint32_t> allowed;
  for (uint32_t id = 0; id < options.vocab_size; ++id) {
    if (std::find(options.excluded_ids.begin(), options.excluded_ids.end(), id) ==
        options.excluded_ids.end()) {
      allowed.push_back(id);
    }
  }
  if (allowed.empty()) return absl::InvalidArgumentError("no token id left to sample prompts from");

  std::mt19937_64 rng = Generator(options.seed, level);
  std::uniform_int_distribution<int> prompt_len(options.min_prompt_tokens,
                                                options.max_prompt_tokens);
  std::uniform_int_distribution<int> output_len(options.min_output_tokens,
                                                options.max_output_tokens);
  std::uniform_int_distribution<size_t> token(0, allowed.size() - 1);
  std::vector<RequestSpec> requests(count);
  for (RequestSpec& request : requests) {
    request.prompt.resize(prompt_len(rng));
    for (uint32_t& id : request.prompt) id = allowed[token(rng)];
    request.max_new_tokens = static_cast<uint32_t>(output_len(rng));
  }
  return requests;
}

absl::StatusOr<std::vector<double>> PoissonArrivals(double rate_per_s, uint64_t seed, int level,
                                                    int count) {
  if (!(rate_per_s > 0)) {
    return absl::InvalidArgumentError(absl::StrCat("arrival rate must be > 0, got ", rate_per_s));
  }
  if (count < 0) return absl::InvalidArgumentError("negative request count");
  std::mt19937_64 rng = Generator(seed ^ 0xa11a1u, level);
  std::exponential_distribution<double> gap(rate_per_s);
  std::vector<double> arrivals(count);
  double t = 0;
  for (double& a : arrivals) a = (t += gap(rng));
  return arrivals;
}

}  // namespace weir::bench
