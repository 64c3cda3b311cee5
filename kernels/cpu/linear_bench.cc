// kernels/cpu/linear_bench.cc
//
// Linear through OpenBLAS sgemm against a plain triple loop over the same
// dequantized weight, for fp32 and FP8 weights. Run:
//   tools/bazel run //kernels/cpu:linear_bench -- --benchmark_min_time=0.2

#include <random>
#include <vector>

#include "benchmark/benchmark.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/weight_quant.h"

namespace weir::kernels::cpu {
namespace {

constexpr int64_t kRows = 16, kOut = 1024, kIn = 1024;

std::vector<float> Random(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.05f);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

void BM_NaiveLoop(benchmark::State& state) {
  const std::vector<float> w = Random(kOut * kIn, 1), x = Random(kRows * kIn, 2);
  std::vector<float> y(kRows * kOut);
  for (auto _ : state) {
    for (int64_t i = 0; i < kRows; ++i) {
      for (int64_t j = 0; j < kOut; ++j) {
        float acc = 0.0f;
        for (int64_t c = 0; c < kIn; ++c) acc += x[i * kIn + c] * w[j * kIn + c];
        y[i * kOut + j] = acc;
      }
    }
    benchmark::DoNotOptimize(y.data());
  }
  state.SetItemsProcessed(state.iterations() * kRows * kOut * kIn);
}
BENCHMARK(BM_NaiveLoop);

void BM_LinearF32(benchmark::State& state) {
  const std::vector<float> w = Random(kOut * kIn, 1), x = Random(kRows * kIn, 2);
  std::vector<float> y(kRows * kOut);
  LinearWeight weight{.format = WeightFormat::kF32, .out_features = kOut, .in_features = kIn,
                      .f32 = w};
  for (auto _ : state) {
    if (!Linear(weight, {.x = x, .y = y, .rows = kRows}).ok()) state.SkipWithError("Linear");
    benchmark::DoNotOptimize(y.data());
  }
  state.SetItemsProcessed(state.iterations() * kRows * kOut * kIn);
}
BENCHMARK(BM_LinearF32);

void BM_LinearFp8(benchmark::State& state) {
  const std::vector<float> w = Random(kOut * kIn, 1), x = Random(kRows * kIn, 2);
  std::vector<uint8_t> codes(kOut * kIn), scales(Fp8WeightScaleCount(kOut, kIn, 32));
  if (!QuantizeFp8Weight(w, kOut, kIn, 32, codes, scales).ok()) state.SkipWithError("quantize");
  std::vector<float> y(kRows * kOut);
  LinearWeight weight{.format = WeightFormat::kFp8, .out_features = kOut, .in_features = kIn,
                      .data = codes, .scales = scales};
  for (auto _ : state) {
    if (!Linear(weight, {.x = x, .y = y, .rows = kRows}).ok()) state.SkipWithError("Linear");
    benchmark::DoNotOptimize(y.data());
  }
  state.SetItemsProcessed(state.iterations() * kRows * kOut * kIn);
}
BENCHMARK(BM_LinearFp8);

}  // namespace
}  // namespace weir::kernels::cpu
