// tools/bench/fp8_peak.h
//
// The ceiling a prefill benchmark reports against: cuBLASLt's FP8 GEMM
// (e4m3 x e4m3, fp32 accumulation, bf16 output, per-tensor scales of 1) on
// one large square problem, measured on the device in the same run.
//
// Thread safety: one call at a time per device (it allocates and frees).

#ifndef WEIR_TOOLS_BENCH_FP8_PEAK_H_
#define WEIR_TOOLS_BENCH_FP8_PEAK_H_

#include <cstdint>

#include "absl/status/statusor.h"

namespace weir::bench {

// TFLOP/s (2 n^3 / median time of `reps` launches after a warm-up,
// kernels/cuda/cublaslt_fp8.h) of cuBLASLt's FP8 GEMM of n x n by n x n on
// the current device, inputs random bytes of e4m3's finite range.
// UNAVAILABLE when cuBLASLt has no algorithm for it (or a launch fails),
// INTERNAL on a CUDA failure.
absl::StatusOr<double> CublasLtFp8Tflops(int64_t n = 8192, int reps = 20);

}  // namespace weir::bench

#endif  // WEIR_TOOLS_BENCH_FP8_PEAK_H_
