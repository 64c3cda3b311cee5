// kernels/cuda/attention/sparse_decode_attention_bench.cc
//
// Times SparseDecodeAttention at the V4.1 decode shape (64 heads x 512, window
// 128 + index_topk 512 of a 65536-entry compressed context per query) for
// batches 1, 8, 32, 64 and 1,024 (a prefill chunk's worth of queries), next
// to a device copy measured in the same run and the reference SparseAttention
// (fp32 rows, one block per (query, head)) on the same selections (not at
// 1,024: its host-gathered table would take 1.3 GB).
//
//   sparse_decode_attention_bench [--iters=N] [--context=N] [--topk=N] [--batch=N]
//                                 [--graph=0] [--kernel=0|1|2] [--range_tiles=A,B,..]
//                                 [--mirror=1] [--overlap=1] [--hash=1] (on the GPU machine)
// --batch=N times that batch only (default: 1, 8, 32, 64, 1024); --graph=0
// skips the graph timing (e.g. under ncu); --kernel=1 times
// SparseDecodeKernel::kMma16 only, 2 kWgmma64 only, 0 (default) both, each
// batch size in turn; --range_tiles lists kWgmma64's wgmma_range_tiles to
// time (default 0: the kernel's 2; row label wgmma64/rN for N != 0);
// --mirror=1 times each kWgmma64 run again on bf16 mirrors of the pools
// (DequantizeKvMirror of every row, made once, not timed; label wgmma64m):
// the rows copied instead of dequantized, 1 KB a row read instead of 528 /
// 288 B (the KV columns still count the stored bytes); --overlap=1 times each
// kWgmma64 run (and mirror run) with wgmma_overlap as well (label suffix +o);
// --hash=1 prints a hash of each run's output bytes ("out hash" lines).
//
// Every query has its own sequence (64 x 65536 compressed rows, 1.2 GB) and
// the launches rotate over 1024 index rows, so the KV rows a launch gathers
// are not left in L2 by the previous launches (q and out are reused: they
// are the step's activations). Times: CUDA events around each launch, median
// after warm-up; and the mean of a CUDA graph of 32 launches (no launch gaps).
// Bytes count the KV rows in stored form (528 B per window row, 288 B per
// compressed row; all entries valid); "all" adds q and out (fp32) and the
// index rows.

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "kernels/cpu/quant.h"
#include "kernels/cuda/attention/kv_mirror.h"
#include "kernels/cuda/attention/sparse_attention.h"
#include "kernels/cuda/attention/sparse_decode_attention_sm90.h"
#include "kernels/cuda/bench_util.h"

namespace weir::kernels::cuda {
namespace {

constexpr int kD = kSparseDecodeHeadDim;
constexpr int kHeads = 64;
constexpr int kMaxBatch = 64;      // sequences (each its own KV region)
constexpr int kMaxQueries = 1024;  // queries of the largest batch (query r reads sequence r % 64)
constexpr int kIndexRows = 1024;  // rotation of index rows (a multiple of every batch)

void Check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(err));
    std::exit(1);
  }
}

void CheckOk(const absl::Status& st, const char* what) {
  if (!st.ok()) {
    std::fprintf(stderr, "%s: %s\n", what, st.ToString().c_str());
    std::exit(1);
  }
}

template <typename T>
T* DeviceAlloc(size_t n) {
  T* p = nullptr;
  Check(cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(T)), "cudaMalloc");
  return p;
}

template <typename T>
T* DeviceCopy(const std::vector<T>& host) {
  T* p = DeviceAlloc<T>(host.size());
  Check(cudaMemcpy(p, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice), "upload");
  return p;
}

// Mean milliseconds per launch of a CUDA graph of `n` launches of fn(i), on
// a stream of its own (median of `reps` replays after 3).
double GraphMs(const std::function<void(int, cudaStream_t)>& fn, int n, int reps) {
  cudaStream_t stream;
  Check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
  const double ms = GraphMedianMs(fn, n, stream, reps, 3, cudaStreamCaptureModeGlobal);
  cudaStreamDestroy(stream);
  return ms / n;
}

int IntFlag(int argc, char** argv, const char* name, int fallback) {
  return static_cast<int>(BenchFlag(argc, argv, name, fallback));
}

int Run(int argc, char** argv) {
  const int iters = IntFlag(argc, argv, "iters", 200);
  const int64_t context = IntFlag(argc, argv, "context", 65536);
  const int topk = IntFlag(argc, argv, "topk", 512);
  const int only_batch = IntFlag(argc, argv, "batch", 0);
  const bool graph = IntFlag(argc, argv, "graph", 1) != 0;
  const int window = 128;
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);

  // Compressed pool: one random sequence of `context` rows, quantized on the
  // host, copied to the region of each of the 64 sequences.
  std::vector<float> rows(context * kD);
  for (float& v : rows) v = normal(rng);
  std::vector<uint8_t> comp_codes(context * kD / 2), comp_scales(context * kD / 16);
  CheckOk(cpu::QuantizeFp4(rows, 16, cpu::Fp4Scale::kE4m3, comp_codes, comp_scales), "fp4");
  const int64_t comp_rows = kMaxBatch * context;
  uint8_t* d_comp_codes = DeviceAlloc<uint8_t>(comp_rows * kD / 2);
  uint8_t* d_comp_scales = DeviceAlloc<uint8_t>(comp_rows * kD / 16);
  Check(cudaMemcpy(d_comp_codes, comp_codes.data(), comp_codes.size(), cudaMemcpyHostToDevice),
        "upload");
  Check(cudaMemcpy(d_comp_scales, comp_scales.data(), comp_scales.size(), cudaMemcpyHostToDevice),
        "upload");
  for (int s = 1; s < kMaxBatch; ++s) {
    Check(cudaMemcpy(d_comp_codes + s * comp_codes.size(), d_comp_codes, comp_codes.size(),
                     cudaMemcpyDeviceToDevice),
          "replicate");
    Check(cudaMemcpy(d_comp_scales + s * comp_scales.size(), d_comp_scales, comp_scales.size(),
                     cudaMemcpyDeviceToDevice),
          "replicate");
  }
  // Window pool: the 128-slot ring of each sequence, FP8.
  const int64_t win_rows = kMaxBatch * window;
  std::vector<float> wrows(win_rows * kD);
  for (float& v : wrows) v = normal(rng);
  std::vector<uint8_t> win_codes(wrows.size()), win_scales(wrows.size() / 32);
  CheckOk(cpu::QuantizeFp8(wrows, 32, win_codes, win_scales), "fp8");
  uint8_t* d_win_codes = DeviceCopy(win_codes);
  uint8_t* d_win_scales = DeviceCopy(win_scales);

  // Index rows: row r belongs to sequence r % 64; the window lists its ring
  // (oldest first), the compressed part `topk` distinct positions ascending.
  std::vector<int32_t> win_index(kIndexRows * window), comp_index(kIndexRows * topk);
  std::vector<int32_t> positions(context);
  for (int r = 0; r < kIndexRows; ++r) {
    const int s = r % kMaxBatch;
    const int oldest = static_cast<int>(rng() % window);
    for (int j = 0; j < window; ++j) win_index[r * window + j] = s * window + (oldest + j) % window;
    std::iota(positions.begin(), positions.end(), 0);
    for (int j = 0; j < topk; ++j) {
      std::swap(positions[j], positions[j + rng() % (context - j)]);
    }
    std::sort(positions.begin(), positions.begin() + topk);
    for (int j = 0; j < topk; ++j) {
      comp_index[r * topk + j] = static_cast<int32_t>(s * context + positions[j]);
    }
  }
  int32_t* d_win_index = DeviceCopy(win_index);
  int32_t* d_comp_index = DeviceCopy(comp_index);
  std::vector<float> q(static_cast<size_t>(kMaxQueries) * kHeads * kD), sink(kHeads);
  for (float& v : q) v = normal(rng);
  cpu::RoundToBf16InPlace(q);
  for (float& v : sink) v = normal(rng);
  float* d_q = DeviceCopy(q);
  float* d_sink = DeviceCopy(sink);
  float* d_out = DeviceAlloc<float>(q.size());
  float* d_ref_out = DeviceAlloc<float>(q.size());

  // Device copy bandwidth, read + write counted.
  const double copy_gbs = CopyGbps(nullptr, 20, 5);
  std::printf("device copy: %.1f GB/s (1 GiB D2D, read + write counted)\n", copy_gbs);
  std::printf("shape: heads %d, head_dim %d, window %d (FP8) + topk %d (FP4) of context %lld\n\n",
              kHeads, kD, window, topk, static_cast<long long>(context));
  std::printf("%11s %5s | %9s %9s | %8s %8s %6s | %8s %6s | %7s | %9s %7s | %8s\n", "kernel",
              "batch", "fast us", "graph us", "KV MB", "KV GB/s", "/copy", "all GB/s", "/copy",
              "TFLOP/s", "ref us", "ref/fast", "rel L2");

  const int only_kernel = IntFlag(argc, argv, "kernel", 0);
  std::vector<int> range_tiles;
  for (const int64_t t : BenchListFlag(argc, argv, "range_tiles", {})) {
    range_tiles.push_back(static_cast<int>(t));
  }
  if (range_tiles.empty()) range_tiles.push_back(0);
  // --mirror: every row of both pools in bf16 (one sequence whose ring is the
  // window pool and whose entries are the compressed rows, one a block).
  const bool mirror = IntFlag(argc, argv, "mirror", 0) != 0;
  const bool overlap = IntFlag(argc, argv, "overlap", 0) != 0;
  const bool hash = IntFlag(argc, argv, "hash", 0) != 0;
  uint16_t* d_win16 = nullptr;
  uint16_t* d_comp16 = nullptr;
  if (mirror) {
    d_win16 = DeviceAlloc<uint16_t>(win_rows * kD);
    d_comp16 = DeviceAlloc<uint16_t>(comp_rows * kD);
    std::vector<int32_t> identity(comp_rows);
    std::iota(identity.begin(), identity.end(), 0);
    int32_t* d_identity = DeviceCopy(identity);
    int32_t* d_zero = DeviceCopy(std::vector<int32_t>{0});
    int64_t* d_last = DeviceCopy(std::vector<int64_t>{comp_rows - 1});
    CheckOk(DequantizeKvMirror({.window_codes = d_win_codes,
                                .window_scales = d_win_scales,
                                .window_bf16 = d_win16,
                                .window_rows = win_rows,
                                .ring_rows = win_rows,
                                .compressed_codes = d_comp_codes,
                                .compressed_scales = d_comp_scales,
                                .compressed_bf16 = d_comp16,
                                .compressed_rows = comp_rows,
                                .block_table = d_identity,
                                .table_width = static_cast<int>(comp_rows),
                                .entries_per_block = 1,
                                .ratio = 1,
                                .slot = d_zero,
                                .last_position = d_last,
                                .stage_first = d_zero,
                                .stage_rows = d_zero,
                                .sequences = 1,
                                .max_rows = win_rows + comp_rows},
                               nullptr),
            "mirror");
    Check(cudaDeviceSynchronize(), "mirror");
    cudaFree(d_identity);
    cudaFree(d_zero);
    cudaFree(d_last);
  }
  const auto params = [&](SparseDecodeKernel kernel, int range, int batch, int offset,
                          bool from_mirror = false, bool overlapped = false) {
    return SparseDecodeAttentionParams{
        .q = d_q,
        .sink = d_sink,
        .window_codes = d_win_codes,
        .window_scales = d_win_scales,
        .window_index = d_win_index + static_cast<int64_t>(offset) * window,
        .window_rows = win_rows,
        .window_width = window,
        .compressed_codes = d_comp_codes,
        .compressed_scales = d_comp_scales,
        .compressed_index = d_comp_index + static_cast<int64_t>(offset) * topk,
        .compressed_rows = comp_rows,
        .compressed_width = topk,
        .out = d_out,
        .queries = batch,
        .heads = kHeads,
        .kernel = kernel,
        .wgmma_range_tiles = range,
        .window_bf16 = from_mirror ? d_win16 : nullptr,
        .compressed_bf16 = from_mirror ? d_comp16 : nullptr,
        .wgmma_overlap = overlapped};
  };
  for (int batch : {1, 8, 32, 64, kMaxQueries}) {
    if (only_batch != 0 && batch != only_batch) continue;
    const double kv_bytes = double(batch) * (window * 528.0 + topk * 288.0);
    const double all_bytes =
        kv_bytes + double(batch) * (2.0 * kHeads * kD * 4 + (window + topk) * 4.0);
    const double flops = 4.0 * batch * kHeads * (window + topk) * kD;

    // Reference on the selections of index offset 0 (once a batch size, for
    // both kernels): fp32 rows gathered on the host (dequantized), one table
    // row per list entry. Not at the prefill-sized batch.
    const bool checked = batch <= kMaxBatch;
    const int width = window + topk;
    std::vector<float> table(checked ? static_cast<size_t>(batch) * width * kD : 0);
    std::vector<int32_t> ref_index(checked ? batch * width : 0);
    for (int b = 0; b < (checked ? batch : 0); ++b) {
      for (int j = 0; j < width; ++j) {
        float* dst = table.data() + (static_cast<size_t>(b) * width + j) * kD;
        if (j < window) {
          const int64_t t = win_index[b * window + j];
          CheckOk(cpu::DequantizeFp8(std::span(win_codes).subspan(t * kD, kD),
                                     std::span(win_scales).subspan(t * kD / 32, kD / 32), 32,
                                     std::span(dst, kD)),
                  "dequant");
        } else {
          const int64_t t = comp_index[b * topk + j - window] % context;  // content of region 0
          CheckOk(cpu::DequantizeFp4(std::span(comp_codes).subspan(t * kD / 2, kD / 2),
                                     std::span(comp_scales).subspan(t * kD / 16, kD / 16), 16,
                                     cpu::Fp4Scale::kE4m3, std::span(dst, kD)),
                  "dequant");
        }
        ref_index[b * width + j] = b * width + j;
      }
    }
    float* d_table = DeviceCopy(table);
    int32_t* d_ref_index = DeviceCopy(ref_index);
    const SparseAttentionParams ref{.q = d_q,
                                    .kv = d_table,
                                    .sink = d_sink,
                                    .index = d_ref_index,
                                    .out = d_ref_out,
                                    .queries = batch,
                                    .heads = kHeads,
                                    .head_dim = kD,
                                    .kv_len = static_cast<int64_t>(batch) * width,
                                    .topk = width};
    double ref_ms = 0.0;
    std::vector<float> want(checked ? static_cast<size_t>(batch) * kHeads * kD : 0);
    std::vector<float> got(want.size());
    if (checked) {
      ref_ms = MedianMs([&] { CheckOk(SparseAttention(ref, nullptr), "reference"); }, nullptr,
                        std::max(3, iters / 20), 5);
      Check(cudaDeviceSynchronize(), "reference");
      Check(cudaMemcpy(want.data(), d_ref_out, want.size() * 4, cudaMemcpyDeviceToHost),
            "download");
    }
    cudaFree(d_table);
    cudaFree(d_ref_index);

    // {kernel, range tiles}: kMma16 once, kWgmma64 at each asked range size.
    // {kernel, range tiles, mirror}.
    std::vector<std::tuple<SparseDecodeKernel, int, bool, bool>> runs;
    if (only_kernel != 2) runs.emplace_back(SparseDecodeKernel::kMma16, 0, false, false);
    if (only_kernel != 1) {
      for (const int r : range_tiles) {
        for (const bool m : {false, true}) {
          if (m && !mirror) continue;
          runs.emplace_back(SparseDecodeKernel::kWgmma64, r, m, false);
          if (overlap) runs.emplace_back(SparseDecodeKernel::kWgmma64, r, m, true);
        }
      }
    }
    const int reps = checked ? iters : std::max(5, iters / 20);
    for (const auto& [k, range, from_mirror, overlapped] : runs) {
      const auto launch = [&](int i, cudaStream_t stream) {
        CheckOk(
            SparseDecodeAttention(
                params(k, range, batch, (i * batch) % kIndexRows, from_mirror, overlapped), stream),
            "launch");
      };
      const double fast_ms = MedianMs([&](int i) { launch(i, nullptr); }, nullptr, reps, 5);
      Check(cudaDeviceSynchronize(), "fast kernel");
      const double graph_ms = graph ? GraphMs(launch, checked ? 32 : 4, checked ? 20 : 5) : 0.0;
      double rel = 0.0;
      if (checked) {
        CheckOk(SparseDecodeAttention(params(k, range, batch, 0, from_mirror, overlapped), nullptr),
                "launch");
        Check(cudaDeviceSynchronize(), "kernels");
        Check(cudaMemcpy(got.data(), d_out, got.size() * 4, cudaMemcpyDeviceToHost), "download");
        double num = 0, den = 0;
        for (size_t i = 0; i < got.size(); ++i) {
          num += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
          den += double(want[i]) * want[i];
        }
        rel = std::sqrt(num / den);
      }
      const double kv_gbs = kv_bytes / (fast_ms * 1e-3) / 1e9;
      const double all_gbs = all_bytes / (fast_ms * 1e-3) / 1e9;
      const std::string wg =
          std::string(from_mirror ? "wgmma64m" : "wgmma64") + (overlapped ? "+o" : "");
      const std::string label = k == SparseDecodeKernel::kMma16 ? "mma16"
                                : range == 0                    ? wg
                                                                : wg + "/r" + std::to_string(range);
      std::printf(
          "%11s %5d | %9.2f %9.2f | %8.3f %8.1f %6.3f | %8.1f %6.3f | %7.1f | %9.1f %7.1f | "
          "%8.2g\n",
          label.c_str(), batch, fast_ms * 1e3, graph_ms * 1e3, kv_bytes / 1e6, kv_gbs,
          kv_gbs / copy_gbs, all_gbs, all_gbs / copy_gbs, flops / (fast_ms * 1e-3) / 1e12,
          ref_ms * 1e3, checked ? ref_ms / fast_ms : 0.0, rel);
      if (hash) {
        // The output's bytes (the batch at offset 0), FNV-1a: two binaries
        // of the same kernel arithmetic print the same hash.
        CheckOk(SparseDecodeAttention(params(k, range, batch, 0, from_mirror, overlapped), nullptr),
                "launch");
        std::vector<uint8_t> bytes(static_cast<size_t>(batch) * kHeads * kD * 4);
        Check(cudaMemcpy(bytes.data(), d_out, bytes.size(), cudaMemcpyDeviceToHost), "download");
        uint64_t h = 1469598103934665603ull;
        for (uint8_t b : bytes) h = (h ^ b) * 1099511628211ull;
        std::printf("out hash %s %d %016llx\n", label.c_str(), batch,
                    static_cast<unsigned long long>(h));
      }
    }
  }
  return 0;
}

}  // namespace
}  // namespace weir::kernels::cuda

int main(int argc, char** argv) { return weir::kernels::cuda::Run(argc, argv); }
