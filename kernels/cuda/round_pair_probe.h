// kernels/cuda/round_pair_probe.h
//
// RoundPairProbe: rounding.cuh's RoundToBf16 and RoundPairToBf16 (one
// cvt.rn.bf16x2 for two values, the bf16-staged indexer's term rounding) of
// the same values on the device, so a test can compare their bits: equal on
// every value but a NaN, where the conversion gives the canonical NaN.
//
// Thread safety: stateless.

#ifndef WEIR_KERNELS_CUDA_ROUND_PAIR_PROBE_H_
#define WEIR_KERNELS_CUDA_ROUND_PAIR_PROBE_H_

#include <cstdint>

#include "absl/status/status.h"

typedef struct CUstream_st* cudaStream_t;

namespace weir::kernels::cuda {

struct RoundPairProbeParams {
  const float* in = nullptr;  // device [n]
  float* scalar = nullptr;    // device [n]: RoundToBf16(in[i])
  float* pair = nullptr;      // device [n]: RoundPairToBf16 of (in[2 j], in[2 j + 1])
  int64_t n = 0;              // even
};

// INVALID_ARGUMENT for an odd or negative n or null pointers (n > 0);
// INTERNAL if the launch fails.
absl::Status RoundPairProbe(const RoundPairProbeParams& params, cudaStream_t stream);

}  // namespace weir::kernels::cuda

#endif  // WEIR_KERNELS_CUDA_ROUND_PAIR_PROBE_H_
