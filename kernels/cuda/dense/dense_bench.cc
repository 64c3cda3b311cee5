// kernels/cuda/dense/dense_bench.cc
//
// Times the dense products (RowStableMatmul against cuBLASLt fp32 in the same
// process), the grouped MoE product (RowStableGroupedMatmul against one
// RowStableMatmul per group) and the logits selections on the GPU: CUDA
// events, warm-up, median of repetitions. Prints time, achieved weight
// bandwidth and FLOP rate.
//
//   dense_bench            (on the GPU machine)

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <memory>
#include <random>
#include <vector>

#include "kernels/cuda/dense/gemm_handle.h"
#include "kernels/cuda/dense/grouped_row_stable_matmul.h"
#include "kernels/cuda/dense/row_stable_matmul.h"
#include "kernels/cuda/dense/sampling.h"

namespace weir::kernels::cuda::dense {
namespace {

// Median milliseconds of `reps` runs of `fn`, after 3 warm-up runs.
double MedianMs(const std::function<void()>& fn, int reps) {
  for (int i = 0; i < 3; ++i) fn();
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  std::vector<float> ms(reps);
  for (int i = 0; i < reps; ++i) {
    cudaEventRecord(start);
    fn();
    cudaEventRecord(stop);
    cudaEventSynchronize(stop);
    cudaEventElapsedTime(&ms[i], start, stop);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::nth_element(ms.begin(), ms.begin() + reps / 2, ms.end());
  return ms[reps / 2];
}

float* DeviceRandom(int64_t n, uint32_t seed) {
  std::vector<float> host(n);
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float& f : host) f = normal(rng);
  float* d = nullptr;
  cudaMalloc(&d, n * sizeof(float));
  cudaMemcpy(d, host.data(), n * sizeof(float), cudaMemcpyHostToDevice);
  return d;
}

int Run() {
  absl::StatusOr<std::unique_ptr<GemmHandle>> gemm = GemmHandle::Create();
  if (!gemm.ok()) {
    std::fprintf(stderr, "%s\n", gemm.status().ToString().c_str());
    return 1;
  }
  std::printf("%-6s %-7s %-6s %-4s | %-22s | %-22s | %s\n", "rows", "out", "in", "fp8",
              "row-stable us GB/s TF/s", "cuBLASLt us GB/s TF/s", "row-stable / Lt");
  struct Shape {
    int64_t rows, out, in;
  };
  for (const Shape& s : {Shape{1, 4096, 7168}, Shape{4, 4096, 7168}, Shape{8, 4096, 7168},
                         Shape{16, 4096, 7168}, Shape{32, 4096, 7168}, Shape{128, 4096, 7168},
                         Shape{64, 4096, 7168}, Shape{256, 4096, 7168},
                         Shape{2048, 4096, 7168}, Shape{1, 129280, 4096},
                         Shape{64, 129280, 4096}}) {
    for (bool fp8 : {false, true}) {
      float* x = DeviceRandom(s.rows * s.in, 1);
      float* w = DeviceRandom(s.out * s.in, 2);
      float *y, *scratch;
      cudaMalloc(&y, s.rows * s.out * sizeof(float));
      cudaMalloc(&scratch, s.rows * s.in * sizeof(float));
      const MatmulParams p{.x = x, .w = w, .y = y, .rows = s.rows, .out = s.out, .in = s.in,
                           .fp8_activation = fp8, .act_scratch = scratch};
      const int reps = s.rows >= 1024 ? 5 : 20;
      const double stable_ms = MedianMs([&] { (void)RowStableMatmul(p, nullptr); }, reps);
      const double lt_ms = MedianMs([&] { (void)(*gemm)->Matmul(p, nullptr); }, reps);
      if (cudaError_t err = cudaDeviceSynchronize(); err != cudaSuccess) {
        std::fprintf(stderr, "CUDA error: %s\n", cudaGetErrorString(err));
        return 1;
      }
      const double bytes = 4.0 * (s.out * s.in + s.rows * (s.in + s.out));
      const double flops = 2.0 * s.rows * s.out * s.in;
      std::printf("%-6lld %-7lld %-6lld %-4d | %8.1f %6.0f %6.2f | %8.1f %6.0f %6.2f | %.2f\n",
                  static_cast<long long>(s.rows), static_cast<long long>(s.out),
                  static_cast<long long>(s.in), fp8, stable_ms * 1e3, bytes / stable_ms / 1e6,
                  flops / stable_ms / 1e9, lt_ms * 1e3, bytes / lt_ms / 1e6,
                  flops / lt_ms / 1e9, stable_ms / lt_ms);
      cudaFree(x);
      cudaFree(w);
      cudaFree(y);
      cudaFree(scratch);
      if (s.rows >= 256) break;  // the FP8 activation pass is visible at small rows only
    }
  }
  // MoE expert product of a decode step: tokens * 8 rows over 32 local
  // experts (w1 shape 2048 x 7168), routed at random. Baseline: one
  // RowStableMatmul per non-empty group with host-known sizes (what a CPU-
  // driven step would launch); the grouped launch needs no host sizes.
  // MXFP4: the same grouped product (hinted) reading the experts as e2m1
  // codes + E8M0 scales (1/8 of the fp32 bytes plus 1/128 for scales).
  std::printf("\n%-6s %-6s %-7s | %-14s | %-14s | %-14s | %-19s | %-14s | %s\n", "tokens",
              "groups", "out x in", "grouped us", "hinted us", "per-group us",
              "grouped / per-group", "mxfp4 us", "mxfp4 / hinted fp32");
  for (int64_t tokens : {1, 8, 64}) {
    constexpr int kGroups = 32;
    constexpr int64_t kOut = 2048, kIn = 7168;
    const int64_t rows = tokens * 8;
    std::vector<int64_t> sizes(kGroups, 0);
    std::mt19937 rng(static_cast<uint32_t>(tokens));
    std::uniform_int_distribution<int> pick(0, kGroups - 1);
    for (int64_t r = 0; r < rows; ++r) ++sizes[pick(rng)];
    std::vector<int64_t> offsets(kGroups + 1, 0);
    for (int g = 0; g < kGroups; ++g) offsets[g + 1] = offsets[g] + sizes[g];
    std::vector<float*> w(kGroups);
    for (int g = 0; g < kGroups; ++g) w[g] = DeviceRandom(kOut * kIn, 10 + g);
    float* x = DeviceRandom(rows * kIn, 4);
    float* y;
    int64_t* d_offsets;
    const float** d_w;
    cudaMalloc(&y, rows * kOut * sizeof(float));
    cudaMalloc(&d_offsets, offsets.size() * sizeof(int64_t));
    cudaMalloc(&d_w, kGroups * sizeof(float*));
    cudaMemcpy(d_offsets, offsets.data(), offsets.size() * sizeof(int64_t),
               cudaMemcpyHostToDevice);
    cudaMemcpy(d_w, w.data(), kGroups * sizeof(float*), cudaMemcpyHostToDevice);
    GroupedMatmulParams p{.x = x, .group_offsets = d_offsets, .w = d_w, .y = y, .rows = rows,
                          .out = kOut, .in = kIn, .num_groups = kGroups};
    const double grouped = MedianMs([&] { (void)RowStableGroupedMatmul(p, nullptr); }, 20);
    p.max_group_rows = tokens;  // a token picks an expert at most once
    const double hinted = MedianMs([&] { (void)RowStableGroupedMatmul(p, nullptr); }, 20);
    // Fixed bytes: code pairs 0.5 and -1.5, scale 2^-3 (timing only).
    std::vector<uint8_t*> codes(kGroups), scales(kGroups);
    for (int g = 0; g < kGroups; ++g) {
      cudaMalloc(&codes[g], kOut * kIn / 2);
      cudaMalloc(&scales[g], kOut * kIn / 32);
      cudaMemset(codes[g], 0xB1, kOut * kIn / 2);
      cudaMemset(scales[g], 0x7C, kOut * kIn / 32);
    }
    uint8_t** d_codes;
    uint8_t** d_scales;
    cudaMalloc(&d_codes, kGroups * sizeof(uint8_t*));
    cudaMalloc(&d_scales, kGroups * sizeof(uint8_t*));
    cudaMemcpy(d_codes, codes.data(), kGroups * sizeof(uint8_t*), cudaMemcpyHostToDevice);
    cudaMemcpy(d_scales, scales.data(), kGroups * sizeof(uint8_t*), cudaMemcpyHostToDevice);
    GroupedMatmulParams q = p;
    q.w = nullptr;
    q.w_mxfp4 = d_codes;
    q.w_mxfp4_scales = d_scales;
    if (absl::Status st = RowStableGroupedMatmul(q, nullptr); !st.ok()) {
      std::fprintf(stderr, "MXFP4 grouped product refused: %s\n", st.ToString().c_str());
      return 1;
    }
    const double mxfp4 = MedianMs([&] { (void)RowStableGroupedMatmul(q, nullptr); }, 20);
    const double per_group = MedianMs(
        [&] {
          for (int g = 0; g < kGroups; ++g) {
            if (sizes[g] == 0) continue;
            (void)RowStableMatmul({.x = x + offsets[g] * kIn, .w = w[g],
                                   .y = y + offsets[g] * kOut, .rows = sizes[g], .out = kOut,
                                   .in = kIn},
                                  nullptr);
          }
        },
        20);
    if (cudaError_t err = cudaDeviceSynchronize(); err != cudaSuccess) {
      std::fprintf(stderr, "CUDA error: %s\n", cudaGetErrorString(err));
      return 1;
    }
    std::printf("%-6lld %-6d %4lldx%-4lld | %14.1f | %14.1f | %14.1f | %19.2f | %14.1f | %.2f\n",
                static_cast<long long>(tokens), kGroups, static_cast<long long>(kOut),
                static_cast<long long>(kIn), grouped * 1e3, hinted * 1e3, per_group * 1e3,
                hinted / per_group, mxfp4 * 1e3, mxfp4 / hinted);
    for (float* wg : w) cudaFree(wg);
    for (int g = 0; g < kGroups; ++g) {
      cudaFree(codes[g]);
      cudaFree(scales[g]);
    }
    cudaFree(d_codes);
    cudaFree(d_scales);
    cudaFree(x);
    cudaFree(y);
    cudaFree(d_offsets);
    cudaFree(d_w);
  }

  std::printf("\n%-6s %-7s | %-12s | %-12s | %-12s | %s\n", "rows", "vocab", "argmax us",
              "top-20 us", "top-1024 us", "logsumexp us");
  for (int64_t rows : {1, 8, 64, 256}) {
    const int64_t vocab = 129280;
    float* logits = DeviceRandom(rows * vocab, 3);
    int32_t* ids;
    float* values;
    float* max;
    double* sum;
    cudaMalloc(&ids, rows * kMaxTopK * sizeof(int32_t));
    cudaMalloc(&values, rows * kMaxTopK * sizeof(float));
    cudaMalloc(&max, rows * sizeof(float));
    cudaMalloc(&sum, rows * sizeof(double));
    const double argmax = MedianMs(
        [&] {
          (void)ArgmaxRows({.logits = logits, .rows = rows, .vocab = vocab, .ids = ids}, nullptr);
        },
        20);
    auto topk = [&](int k) {
      return MedianMs(
          [&] {
            (void)TopKRows({.logits = logits, .rows = rows, .vocab = vocab, .k = k,
                            .values = values, .ids = ids},
                           nullptr);
          },
          20);
    };
    const double top20 = topk(20), top1024 = topk(kMaxTopK);
    const double lse = MedianMs(
        [&] {
          (void)RowLogSumExp(
              {.logits = logits, .rows = rows, .vocab = vocab, .max = max, .sum = sum}, nullptr);
        },
        20);
    std::printf("%-6lld %-7lld | %12.1f | %12.1f | %12.1f | %.1f\n", static_cast<long long>(rows),
                static_cast<long long>(vocab), argmax * 1e3, top20 * 1e3, top1024 * 1e3,
                lse * 1e3);
    cudaFree(logits);
    cudaFree(ids);
    cudaFree(values);
    cudaFree(max);
    cudaFree(sum);
  }
  return cudaDeviceSynchronize() == cudaSuccess ? 0 : 1;
}

}  // namespace
}  // namespace weir::kernels::cuda::dense

int main() { return weir::kernels::cuda::dense::Run(); }
