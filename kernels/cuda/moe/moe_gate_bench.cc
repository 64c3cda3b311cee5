// kernels/cuda/moe/moe_gate_bench.cc
//
// The gate's logits of V4.1-Flash (dim 5,120, 384 experts) on the GPU
// machine, at prefill's and decode's token counts: MoeGateLogits (the CPU's
// order in fp32, unfused multiplies and adds: the fast path's today) against
// the tensor-core form of kernels/cuda/moe/README.md item 8 (Bf16Split of X,
// W split once beforehand, one bf16 GEMM over K three times: Bf16GemmCutlass
// where it takes the call, Bf16Gemm's default tile beside it). Per count:
// the medians (CUDA events) of each, the split's share, and the form's
// fidelity to MoeGateLogits: the largest and median relative error of a
// logit and the share of tokens whose top-6 experts by logit agree as sets.
//
//   moe_gate_bench [--tokens=4096,64,1] [--dim=5120] [--experts=384]

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/cuda/bench_util.h"
#include "kernels/cuda/dense/bf16_gemm_cutlass.h"
#include "kernels/cuda/dense/bf16_gemm_sm90.h"
#include "kernels/cuda/moe/bf16_split.h"
#include "kernels/cuda/moe/moe_gate.h"

namespace weir::kernels::cuda {
namespace {

constexpr int kTopk = 6;

std::vector<int> TopK(const float* row, int n) {
  std::vector<int> idx(n);
  std::iota(idx.begin(), idx.end(), 0);
  std::partial_sort(idx.begin(), idx.begin() + kTopk, idx.end(),
                    [&](int a, int b) { return row[a] > row[b] || (row[a] == row[b] && a < b); });
  idx.resize(kTopk);
  std::sort(idx.begin(), idx.end());
  return idx;
}

int Run(int argc, char** argv) {
  const std::vector<int64_t> counts = BenchListFlag(argc, argv, "tokens", {4096, 64, 1});
  const int64_t dim = BenchFlag(argc, argv, "dim", 5120);
  const int experts = static_cast<int>(BenchFlag(argc, argv, "experts", 384));
  cudaStream_t stream;
  WEIR_BENCH_CHECK(cudaStreamCreate(&stream));
  std::mt19937 rng(2026);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int64_t max_tokens = *std::max_element(counts.begin(), counts.end());
  std::vector<float> x(max_tokens * dim), w(experts * dim);
  for (float& v : x) v = normal(rng);
  for (float& v : w) v = 0.02f * normal(rng);  // a trained gate's scale
  float* dx = BenchUpload(x);
  float* dw = BenchUpload(w);
  uint16_t *xs = nullptr, *ws = nullptr;
  float *ref = nullptr, *out = nullptr;
  WEIR_BENCH_CHECK(cudaMalloc(&xs, max_tokens * 3 * dim * sizeof(uint16_t)));
  WEIR_BENCH_CHECK(cudaMalloc(&ws, experts * 3 * dim * sizeof(uint16_t)));
  WEIR_BENCH_CHECK(cudaMalloc(&ref, max_tokens * experts * sizeof(float)));
  WEIR_BENCH_CHECK(cudaMalloc(&out, max_tokens * experts * sizeof(float)));
  const auto ok = [](const absl::Status& s) {
    if (!s.ok()) {
      std::fprintf(stderr, "%s\n", s.ToString().c_str());
      std::exit(1);
    }
  };
  ok(Bf16Split({.x = dw, .out = ws, .rows = experts, .cols = dim, .weight_side = true}, stream));
  std::printf(
      "gate logits, dim %lld, %d experts: MoeGateLogits (fp32, the CPU's order) against one bf16 "
      "GEMM over the hi/lo splits (K x 3)\n"
      "tokens | MoeGateLogits us | split us | cutlass us  Bf16Gemm us | best form / MoeGateLogits "
      "| max rel err  median rel err | top-6 sets agreeing\n",
      static_cast<long long>(dim), experts);
  for (const int64_t tokens : counts) {
    const MoeGateLogitsParams lp{
        .x = dx, .weight = dw, .logits = ref, .tokens = tokens, .dim = dim, .num_experts = experts};
    const Bf16SplitParams sp{.x = dx, .out = xs, .rows = tokens, .cols = dim};
    const dense::Bf16GemmParams gp{
        .x = xs, .w = ws, .y = out, .m = tokens, .n = experts, .k = 3 * dim};
    const double ref_ms = MedianMs([&] { ok(MoeGateLogits(lp, stream)); }, stream, 10);
    const double split_ms = MedianMs([&] { ok(Bf16Split(sp, stream)); }, stream, 10);
    const bool cutlass = dense::Bf16GemmCutlassTakes(gp) &&
                         dense::ResolveBf16GemmTile(gp) == dense::Fp8GemmTile::kN128M128Ws;
    const double cut_ms =
        cutlass ? MedianMs([&] { ok(dense::Bf16GemmCutlass(gp, stream)); }, stream, 10) : 0.0;
    const double ours_ms = MedianMs([&] { ok(dense::Bf16Gemm(gp, stream)); }, stream, 10);
    // The logits compared: the default tile's (CUTLASS gives its bits where
    // it runs: bf16_gemm_cutlass_test).
    ok(MoeGateLogits(lp, stream));
    ok(Bf16Split(sp, stream));
    ok(dense::Bf16Gemm(gp, stream));
    WEIR_BENCH_CHECK(cudaStreamSynchronize(stream));
    std::vector<float> a(tokens * experts), b(tokens * experts);
    WEIR_BENCH_CHECK(cudaMemcpy(a.data(), ref, a.size() * 4, cudaMemcpyDeviceToHost));
    WEIR_BENCH_CHECK(cudaMemcpy(b.data(), out, b.size() * 4, cudaMemcpyDeviceToHost));
    std::vector<double> rel(a.size());
    for (size_t i = 0; i < a.size(); ++i) {
      rel[i] = std::fabs(static_cast<double>(b[i]) - a[i]) / std::max(1e-30, std::fabs(static_cast<double>(a[i])));
    }
    std::vector<double> sorted = rel;
    std::nth_element(sorted.begin(), sorted.begin() + sorted.size() / 2, sorted.end());
    const double median = sorted[sorted.size() / 2];
    const double worst = *std::max_element(rel.begin(), rel.end());
    int64_t agree = 0;
    for (int64_t t = 0; t < tokens; ++t) {
      agree += TopK(&a[t * experts], experts) == TopK(&b[t * experts], experts);
    }
    const double best = split_ms + (cutlass ? std::min(cut_ms, ours_ms) : ours_ms);
    std::printf("%6lld | %16.2f | %8.2f | %10.2f  %11.2f | %25.2f | %11.3g  %14.3g | %.4f\n",
                static_cast<long long>(tokens), ref_ms * 1e3, split_ms * 1e3, cut_ms * 1e3,
                ours_ms * 1e3, best / ref_ms, worst, median,
                static_cast<double>(agree) / static_cast<double>(tokens));
  }
  return 0;
}

}  // namespace
}  // namespace weir::kernels::cuda

int main(int argc, char** argv) { return weir::kernels::cuda::Run(argc, argv); }
