#include "kernels/cuda/bench_util.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace weir::kernels::cuda {

double MedianMs(const std::function<void(int)>& fn, cudaStream_t stream, int reps, int warmup) {
  for (int i = 0; i < warmup; ++i) fn(i);
  cudaEvent_t start, stop;
  WEIR_BENCH_CHECK(cudaEventCreate(&start));
  WEIR_BENCH_CHECK(cudaEventCreate(&stop));
  std::vector<float> ms(reps);
  for (int i = 0; i < reps; ++i) {
    WEIR_BENCH_CHECK(cudaEventRecord(start, stream));
    fn(i);
    WEIR_BENCH_CHECK(cudaEventRecord(stop, stream));
    WEIR_BENCH_CHECK(cudaEventSynchronize(stop));
    WEIR_BENCH_CHECK(cudaEventElapsedTime(&ms[i], start, stop));
  }
  WEIR_BENCH_CHECK(cudaEventDestroy(start));
  WEIR_BENCH_CHECK(cudaEventDestroy(stop));
  std::nth_element(ms.begin(), ms.begin() + reps / 2, ms.end());
  return ms[reps / 2];
}

double MedianMs(const std::function<void()>& fn, cudaStream_t stream, int reps, int warmup) {
  return MedianMs([&](int) { fn(); }, stream, reps, warmup);
}

double GraphMedianMs(const std::function<void(int, cudaStream_t)>& enqueue, int calls,
                     cudaStream_t stream, int reps, int warmup, cudaStreamCaptureMode mode) {
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  WEIR_BENCH_CHECK(cudaStreamBeginCapture(stream, mode));
  for (int c = 0; c < calls; ++c) enqueue(c, stream);
  WEIR_BENCH_CHECK(cudaStreamEndCapture(stream, &graph));
  WEIR_BENCH_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  const double ms =
      MedianMs([&] { WEIR_BENCH_CHECK(cudaGraphLaunch(exec, stream)); }, stream, reps, warmup);
  WEIR_BENCH_CHECK(cudaGraphExecDestroy(exec));
  WEIR_BENCH_CHECK(cudaGraphDestroy(graph));
  WEIR_BENCH_CHECK(cudaGetLastError());
  return ms;
}

double CopyGbps(cudaStream_t stream, int reps, int warmup) {
  const int64_t bytes = int64_t{1} << 30;
  void *a, *b;
  WEIR_BENCH_CHECK(cudaMalloc(&a, bytes));
  WEIR_BENCH_CHECK(cudaMalloc(&b, bytes));
  WEIR_BENCH_CHECK(cudaMemset(a, 1, bytes));
  const double ms = MedianMs(
      [&] { WEIR_BENCH_CHECK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, stream)); },
      stream, reps, warmup);
  WEIR_BENCH_CHECK(cudaFree(a));
  WEIR_BENCH_CHECK(cudaFree(b));
  return 2.0 * bytes / ms / 1e6;
}

namespace {

// The value text of the first `--NAME=` argument, else null.
const char* FlagText(int argc, char** argv, const char* name) {
  const std::string prefix = std::string("--") + name + "=";
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], prefix.c_str(), prefix.size()) == 0) return argv[i] + prefix.size();
  }
  return nullptr;
}

}  // namespace

int64_t BenchFlag(int argc, char** argv, const char* name, int64_t fallback) {
  const char* text = FlagText(argc, argv, name);
  return text == nullptr ? fallback : std::atoll(text);
}

std::vector<int64_t> BenchListFlag(int argc, char** argv, const char* name,
                                   std::vector<int64_t> fallback) {
  const char* text = FlagText(argc, argv, name);
  if (text == nullptr) return fallback;
  std::vector<int64_t> out;
  while (*text != '\0') {
    char* end = nullptr;
    const long long v = std::strtoll(text, &end, 10);
    if (end == text) break;
    out.push_back(v);
    text = *end == ',' ? end + 1 : end;
  }
  return out;
}

}  // namespace weir::kernels::cuda
