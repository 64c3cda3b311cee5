// The CPU sampler's cost per row (what a worker pays on the host for every
// sampled token of a step, after the logits come back): greedy with and
// without its logprob, greedy with a repetition penalty over a long output,
// seeded top-p (the whole vocabulary sorted) and top-k, at the tiny's /
// small's vocabulary (4,096) and V4.1's (129,280). The ceiling beside them:
// a copy of the row (memcpy), about what one pass over it costs.
//
//   tools/bazel run -c opt //worker/sampling:sampler_bench
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "benchmark/benchmark.h"
#include "worker/sampling/sampler.h"

namespace weir::worker::sampling {
namespace {

std::vector<float> Logits(int64_t vocab) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> row(vocab);
  for (float& v : row) v = normal(rng);
  return row;
}

void BM_CopyRow(benchmark::State& state) {
  const std::vector<float> row = Logits(state.range(0));
  std::vector<float> copy(row.size());
  for (auto _ : state) {
    std::memcpy(copy.data(), row.data(), row.size() * sizeof(float));
    benchmark::DoNotOptimize(copy.data());
    benchmark::ClobberMemory();
  }
}

// range(0): vocabulary; range(1): 0 greedy, 1 greedy with its logprob, 2
// greedy with repetition penalty 1.1 over 2,000 output tokens, 3 top-p 0.95
// at temperature 0.9 (seeded), 4 top-k 50 at temperature 0.9 (seeded).
void BM_Sample(benchmark::State& state) {
  const int32_t vocab = static_cast<int32_t>(state.range(0));
  const std::vector<float> row = Logits(vocab);
  SamplingParams params;
  params.temperature = 0.0f;
  std::vector<int32_t> output;
  const int mode = static_cast<int>(state.range(1));
  if (mode == 2) {
    params.repetition_penalty = 1.1f;
    for (int i = 0; i < 2000; ++i) output.push_back((i * 7919) % vocab);
  }
  if (mode >= 3) {
    params.temperature = 0.9f;
    params.seed = 7;
    if (mode == 3) params.top_p = 0.95f;
    if (mode == 4) params.top_k = 50;
  }
  SampleRow sample{.logits = row.data(), .params = &params, .output_tokens = output,
                   .want_logprob = mode == 1};
  int64_t position = 0;
  for (auto _ : state) {
    sample.position = position++;
    benchmark::DoNotOptimize(SampleBatch({&sample, 1}, vocab));
  }
}

BENCHMARK(BM_CopyRow)->Arg(4096)->Arg(129280);
BENCHMARK(BM_Sample)->ArgsProduct({{4096, 129280}, {0, 1, 2, 3, 4}});

}  // namespace
}  // namespace weir::worker::sampling
