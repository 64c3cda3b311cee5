// The staged SparseAttention kernel (the fast decoder's attention over
// unstored pools, e.g. small's head_dim 256) by heads a block, against the
// device copy rate measured in the same run.
//
//   sparse_attention_bench [--heads=8] [--head_dim=256] [--topk=96]
//                          [--kv_len=4096] [--batches=1,8,32,64,128,256]
//
// Each row: queries, heads a block (0: the launcher's choice, shown in
// brackets), graph-replayed us a launch (20 launches a graph, median of 20
// replays), and the bytes of the listed rows every (query, head) pair needs
// (queries x topk x head_dim x 4, what one read of each query's rows moves)
// over that time, as GB/s and as a share of the copy rate. The floor counts
// each query's rows once (the K = V table is shared by all heads); the
// kernel's traffic from L2 is that times the heads over the heads a block.
// Every variant's output is compared bit for bit with heads a block 1.

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cuda/attention/sparse_attention.h"
#include "kernels/cuda/bench_util.h"

namespace weir::kernels::cuda {
namespace {

int Main(int argc, char** argv) {
  const int heads = static_cast<int>(BenchFlag(argc, argv, "heads", 8));
  const int head_dim = static_cast<int>(BenchFlag(argc, argv, "head_dim", 256));
  const int topk = static_cast<int>(BenchFlag(argc, argv, "topk", 96));
  const int64_t kv_len = BenchFlag(argc, argv, "kv_len", 4096);
  const std::vector<int64_t> batches =
      BenchListFlag(argc, argv, "batches", {1, 8, 32, 64, 128, 256});
  if (heads <= 0 || head_dim <= 0 || topk <= 0 || kv_len <= 0 || batches.empty() ||
      *std::min_element(batches.begin(), batches.end()) <= 0) {
    std::fprintf(stderr, "sparse_attention_bench: bad sizes\n");
    return 2;
  }
  cudaStream_t stream = nullptr;
  WEIR_BENCH_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const double copy_gbps = CopyGbps(stream);
  std::printf("device copy rate (read + write): %.0f GB/s\n", copy_gbps);
  std::printf("heads %d head_dim %d topk %d kv_len %lld\n", heads, head_dim, topk,
              static_cast<long long>(kv_len));
  std::printf("%8s %10s | %9s | %8s %7s | %s\n", "queries", "heads/blk", "us", "GB/s", "of copy",
              "bits vs 1");

  const int64_t max_q = *std::max_element(batches.begin(), batches.end());
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> q(int64_t{max_q} * heads * head_dim), kv(kv_len * head_dim), sink(heads);
  for (float& v : q) v = normal(rng);
  for (float& v : kv) v = normal(rng);
  for (float& v : sink) v = normal(rng);
  std::vector<int32_t> index(int64_t{max_q} * topk);
  std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(kv_len - 1));
  for (int32_t& t : index) t = pick(rng);
  float* dq = BenchUpload(q);
  float* dkv = BenchUpload(kv);
  float* dsink = BenchUpload(sink);
  int32_t* dindex = BenchUpload(index);
  const int64_t out_n = int64_t{max_q} * heads * head_dim;
  float *dout = nullptr, *dref = nullptr;
  WEIR_BENCH_CHECK(cudaMalloc(&dout, out_n * sizeof(float)));
  WEIR_BENCH_CHECK(cudaMalloc(&dref, out_n * sizeof(float)));

  for (const int64_t queries : batches) {
    SparseAttentionParams p{.q = dq,
                            .kv = dkv,
                            .sink = dsink,
                            .index = dindex,
                            .out = dref,
                            .queries = queries,
                            .heads = heads,
                            .head_dim = head_dim,
                            .kv_len = kv_len,
                            .topk = topk,
                            .round_bf16 = true,
                            .staged = true,
                            .heads_per_block = 1};
    if (!SparseAttention(p, stream).ok()) {
      std::fprintf(stderr, "sparse_attention_bench: the launch is refused\n");
      return 1;
    }
    WEIR_BENCH_CHECK(cudaStreamSynchronize(stream));
    const int64_t n = int64_t{queries} * heads * head_dim;
    std::vector<float> want(n), got(n);
    WEIR_BENCH_CHECK(cudaMemcpy(want.data(), dref, n * sizeof(float), cudaMemcpyDeviceToHost));
    for (const int per_block : {0, 1, 2, 4, 8}) {
      if (per_block != 0 && heads % per_block != 0) continue;
      p.out = dout;
      p.heads_per_block = per_block;
      const int chosen = SparseAttentionStagedHeads(p);
      if (chosen == 0) {
        std::printf("%8lld %10d | not staged\n", static_cast<long long>(queries), per_block);
        continue;
      }
      WEIR_BENCH_CHECK(cudaMemsetAsync(dout, 0xff, n * sizeof(float), stream));
      if (!SparseAttention(p, stream).ok()) return 1;
      WEIR_BENCH_CHECK(cudaStreamSynchronize(stream));
      WEIR_BENCH_CHECK(cudaMemcpy(got.data(), dout, n * sizeof(float), cudaMemcpyDeviceToHost));
      const bool same = std::memcmp(got.data(), want.data(), n * sizeof(float)) == 0;
      constexpr int kCalls = 20;
      const double ms = GraphMedianMs(
                            [&](int, cudaStream_t s) {
                              if (!SparseAttention(p, s).ok()) std::exit(1);
                            },
                            kCalls, stream, 20, 3) /
                        kCalls;
      const double bytes = double(queries) * topk * head_dim * 4;
      const double gbps = bytes / (ms * 1e-3) / 1e9;
      char label[32];
      std::snprintf(label, sizeof(label), per_block == 0 ? "0 [%d]" : "%d", chosen);
      std::printf("%8lld %10s | %9.2f | %8.0f %7.3f | %s\n", static_cast<long long>(queries), label,
                  ms * 1e3, gbps, gbps / copy_gbps, same ? "same" : "DIFFER");
      if (!same) return 1;
    }
  }
  return 0;
}

}  // namespace
}  // namespace weir::kernels::cuda

int main(int argc, char** argv) { return weir::kernels::cuda::Main(argc, argv); }
