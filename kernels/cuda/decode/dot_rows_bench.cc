// kernels/cuda/decode/dot_rows_bench.cc
//
// Times RowStableDot's staged tiles (dot_rows.h) and HcMix (moe/mhc.h, given
// products) on the mHC shapes, on the GPU machine: out 24 = (2 + 4) x 4
// mixes, k = 4 x dim for V4.1-Flash (dim 5120) and small (dim 4096), rows
// 1..256 tokens. Time per call as CUDA-graph replays of kCalls back-to-back
// launches over kCalls weight copies (more bytes than L2, as a decode step's
// layers are). Columns: us per call per tile, the tile RowStableDot picks,
// the bytes one call must read (x rows + w) over the device-copy rate
// measured in the same run, and the serial floor of the reference order
// (k / 4 dependent fp32 additions per lane at 4 cycles each, at the SM clock);
// last, HcMixSplitK (moe/hc_mix_split.h, the kFast mHC: products + Sinkhorn
// in one launch) on the same shapes.
//
//   dot_rows_bench   (on the GPU machine)

#include <cuda_runtime.h>

#include <cstdio>
#include <random>
#include <vector>

#include "kernels/cuda/bench_util.h"
#include "kernels/cuda/decode/chain_probe.h"
#include "kernels/cuda/decode/dot_rows.h"
#include "kernels/cuda/moe/hc_mix_split.h"
#include "kernels/cuda/moe/mhc.h"

namespace weir::kernels::cuda::decode {
namespace {

void Probe(bool fp64, cudaStream_t stream) {
  constexpr int kN = 1 << 20;
  long long cycles = 0;
  const double ms = MedianMs(
      [&] {
        if (!EnqueueChainProbe(fp64, kN, stream).ok()) std::exit(1);
      },
      stream, 5, 1);
  if (!ChainProbeCycles(&cycles).ok()) std::exit(1);
  std::printf("%s dependent chain: %.2f cycles per addition, %.2f ns per addition, so the SM "
              "ran at %.0f MHz\n",
              fp64 ? "fp64 __dadd_rn" : "fp32 __fadd_rn", static_cast<double>(cycles) / kN,
              ms * 1e6 / kN, cycles / (ms * 1e3));
}

constexpr int kCalls = 48;  // 48 x 24 x 20480 x 4 B = 94 MB of weights > L2
constexpr int kOut = 24;

float* DeviceRandom(int64_t n, uint32_t seed) {
  std::vector<float> h(n);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (float& v : h) v = u(rng);
  float* d = nullptr;
  WEIR_BENCH_CHECK(cudaMalloc(&d, n * sizeof(float)));
  WEIR_BENCH_CHECK(cudaMemcpy(d, h.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  return d;
}

void Run() {
  cudaStream_t stream;
  WEIR_BENCH_CHECK(cudaStreamCreate(&stream));
  const double copy_gbps = CopyGbps(stream);
  int clock_khz = 0;
  WEIR_BENCH_CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0));
  std::printf("device copy (1 GiB, read + write): %.0f GB/s; SM clock %.0f MHz\n", copy_gbps,
              clock_khz / 1e3);
  Probe(false, stream);
  Probe(true, stream);
  std::printf("RowStableDot, out %d, us per call (graph of %d calls, %d weight copies)\n", kOut,
              kCalls, kCalls);
  std::printf("%6s %6s |", "k", "rows");
  for (int t = 0; t < kRowStableDotTiles; ++t) std::printf("  tile%d", t);
  std::printf(" | picked %8s %8s %8s %8s\n", "copy_us", "chain_us", "HcMix_us", "SplitK_us");
  for (int64_t k : {int64_t{20480}, int64_t{16384}}) {
    std::vector<float*> w(kCalls);
    for (int c = 0; c < kCalls; ++c) w[c] = DeviceRandom(kOut * k, 100 + c);
    for (int64_t rows : {int64_t{1}, int64_t{2}, int64_t{8}, int64_t{32}, int64_t{64},
                         int64_t{256}}) {
      float* x = DeviceRandom(rows * k, 7);
      float* y = nullptr;
      WEIR_BENCH_CHECK(cudaMalloc(&y, rows * kOut * sizeof(float)));
      std::printf("%6lld %6lld |", static_cast<long long>(k), static_cast<long long>(rows));
      for (int t = 0; t < kRowStableDotTiles; ++t) {
        const double ms = GraphMedianMs(
            [&](int c, cudaStream_t s) {
              if (!RowStableDotWithTile({.x = x, .w = w[c], .y = y, .rows = rows, .out = kOut,
                                         .k = k},
                                        t, s)
                       .ok()) {
                std::fprintf(stderr, "tile %d failed\n", t);
                std::exit(1);
              }
            },
            kCalls, stream, 10, 2);
        std::printf(" %6.1f", ms * 1e3 / kCalls);
      }
      const double picked = GraphMedianMs(
          [&](int c, cudaStream_t s) {
            (void)RowStableDot({.x = x, .w = w[c], .y = y, .rows = rows, .out = kOut, .k = k},
                               s);
          },
          kCalls, stream, 10, 2);
      // HcMix on given products (the fast path's call): n = 4, dim = k / 4.
      const int64_t dim = k / 4;
      float* scale = DeviceRandom(3, 1);
      float* base = DeviceRandom(kOut, 2);
      float *pre = nullptr, *post = nullptr, *comb = nullptr;
      WEIR_BENCH_CHECK(cudaMalloc(&pre, rows * 4 * sizeof(float)));
      WEIR_BENCH_CHECK(cudaMalloc(&post, rows * 4 * sizeof(float)));
      WEIR_BENCH_CHECK(cudaMalloc(&comb, rows * 16 * sizeof(float)));
      const double mix = GraphMedianMs(
          [&](int, cudaStream_t s) {
            (void)HcMix({.x = x, .mixes = y, .scale = scale, .base = base, .pre = pre,
                         .post = post, .comb = comb, .tokens = rows, .dim = dim, .hc_mult = 4,
                         .sinkhorn_iters = 20, .hc_eps = 1e-6f, .norm_eps = 1e-6f},
                        s);
          },
          kCalls, stream, 10, 2);
      // HcMixSplitK (kFast): products, sum of squares and Sinkhorn in one launch.
      float* partials = nullptr;
      uint32_t* counters = nullptr;
      WEIR_BENCH_CHECK(
          cudaMalloc(&partials, HcMixSplitPartialFloats(rows, 4, dim) * sizeof(float)));
      WEIR_BENCH_CHECK(cudaMalloc(&counters, HcMixSplitCounters(rows) * sizeof(uint32_t)));
      WEIR_BENCH_CHECK(cudaMemset(counters, 0, HcMixSplitCounters(rows) * sizeof(uint32_t)));
      const double split = GraphMedianMs(
          [&](int c, cudaStream_t s) {
            const absl::Status st = HcMixSplitK(
                {.x = x, .hc_fn = w[c], .scale = scale, .base = base, .pre = pre, .post = post,
                 .comb = comb, .tokens = rows, .dim = dim, .hc_mult = 4, .sinkhorn_iters = 20,
                 .hc_eps = 1e-6f, .norm_eps = 1e-6f},
                {.partials = partials, .counters = counters}, s);
            if (!st.ok()) {
              std::fprintf(stderr, "HcMixSplitK failed\n");
              std::exit(1);
            }
          },
          kCalls, stream, 10, 2);
      WEIR_BENCH_CHECK(cudaFree(partials));
      WEIR_BENCH_CHECK(cudaFree(counters));
      const double bytes = static_cast<double>(rows + kOut) * k * 4;
      const double chain_us = (k / 4) * 4.0 / (clock_khz * 1e3) * 1e6;
      std::printf(" | %6.1f %8.2f %8.2f %8.1f %9.2f\n", picked * 1e3 / kCalls,
                  bytes / (copy_gbps * 1e9) * 1e6, chain_us, mix * 1e3 / kCalls,
                  split * 1e3 / kCalls);
      WEIR_BENCH_CHECK(cudaFree(x));
      WEIR_BENCH_CHECK(cudaFree(y));
      WEIR_BENCH_CHECK(cudaFree(scale));
      WEIR_BENCH_CHECK(cudaFree(base));
      WEIR_BENCH_CHECK(cudaFree(pre));
      WEIR_BENCH_CHECK(cudaFree(post));
      WEIR_BENCH_CHECK(cudaFree(comb));
    }
    for (float* p : w) WEIR_BENCH_CHECK(cudaFree(p));
  }
  WEIR_BENCH_CHECK(cudaStreamDestroy(stream));
}

}  // namespace
}  // namespace weir::kernels::cuda::decode

int main() {
  weir::kernels::cuda::decode::Run();
  return 0;
}
