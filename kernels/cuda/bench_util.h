// kernels/cuda/bench_util.h
//
// Timing helpers of the CUDA kernel benchmarks (*_bench.cc): a CUDA-error
// macro that exits, the median of event-timed runs, CUDA-graph replay timing,
// the device-to-device copy rate the benchmarks compare against, their inputs'
// device copies and their `--name=value` flags.
//
// Thread safety: the functions are thread-compatible; each enqueues on the
// stream it is given and synchronizes on its own events.

#ifndef WEIR_KERNELS_CUDA_BENCH_UTIL_H_
#define WEIR_KERNELS_CUDA_BENCH_UTIL_H_

#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

// Exits the benchmark with file, line, the call and cudaGetErrorString when
// `call` does not return cudaSuccess.
#define WEIR_BENCH_CHECK(call)                                                                   \
  do {                                                                                           \
    if (cudaError_t e_ = (call); e_ != cudaSuccess) {                                            \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
      std::exit(1);                                                                              \
    }                                                                                            \
  } while (0)

namespace weir::kernels::cuda {

// Runs fn(0), ..., fn(warmup - 1) untimed, then fn(0), ..., fn(reps - 1), each
// between two CUDA events recorded on `stream` (null: the legacy default
// stream); returns the median of the `reps` times in ms. `fn` enqueues its
// work on `stream`. Exits on a CUDA error.
// REQUIRES: reps > 0, warmup >= 0.
double MedianMs(const std::function<void(int)>& fn, cudaStream_t stream, int reps,
                int warmup = 3);

// As above, for an `fn` that does not need the run's index.
double MedianMs(const std::function<void()>& fn, cudaStream_t stream, int reps, int warmup = 3);

// Captures enqueue(0, stream), ..., enqueue(calls - 1, stream) into one CUDA
// graph (capture `mode`) and returns MedianMs of replaying the whole graph on
// `stream` (`reps` timed after `warmup` replays), in ms per replay. Exits on
// a CUDA error, including one the replays left pending.
double GraphMedianMs(const std::function<void(int, cudaStream_t)>& enqueue, int calls,
                     cudaStream_t stream, int reps, int warmup,
                     cudaStreamCaptureMode mode = cudaStreamCaptureModeThreadLocal);

// Returns the device-to-device copy rate in GB/s (read + write counted): the
// MedianMs of a 1 GiB cudaMemcpyAsync on `stream`. Allocates 2 GiB for the
// duration of the call.
double CopyGbps(cudaStream_t stream, int reps = 10, int warmup = 3);

// A device copy of `host` (one element's room at least), for the benchmarks'
// inputs; never freed. Exits on a CUDA error.
template <typename T>
T* BenchUpload(const std::vector<T>& host) {
  T* device = nullptr;
  WEIR_BENCH_CHECK(cudaMalloc(&device, (host.empty() ? 1 : host.size()) * sizeof(T)));
  WEIR_BENCH_CHECK(
      cudaMemcpy(device, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  return device;
}

// The integer of the first `--NAME=V` among argv[1 .. argc - 1] (atoll's
// value of V), else `fallback`.
int64_t BenchFlag(int argc, char** argv, const char* name, int64_t fallback);

// The integers of the first `--NAME=A,B,...` among argv[1 .. argc - 1]
// (parsing stops at the first item that is not one), else `fallback`.
std::vector<int64_t> BenchListFlag(int argc, char** argv, const char* name,
                                   std::vector<int64_t> fallback);

}  // namespace weir::kernels::cuda

#endif  // WEIR_KERNELS_CUDA_BENCH_UTIL_H_
