// kernels/cuda/rms_norm.h
//
// RmsNorm on the GPU: the CUDA backend of kernels/cpu/rms_norm.h, same
// formula and rounding order (sum of squares in double in the
// kernels/common/fmath.h LaneSum order by one warp, as the CPU; every other
// step one IEEE operation), so results are bit-identical to the CPU:
//   y[r, i] = weight[i] * (x[r, i] * rsqrt(mean_i(x[r, i]^2) + eps))
//
// Thread safety: stateless; safe from any thread.

#ifndef WEIR_KERNELS_CUDA_RMS_NORM_H_
#define WEIR_KERNELS_CUDA_RMS_NORM_H_

#include <cstdint>

#include "absl/status/status.h"

typedef struct CUstream_st* cudaStream_t;

namespace weir::kernels::cuda {

struct RmsNormParams {
  const float* x = nullptr;       // device [rows, dim]
  const float* weight = nullptr;  // device [dim]; null means all ones
  float* out = nullptr;           // device [rows, dim]; may alias x
  int64_t rows = 0;
  int64_t dim = 0;
  float eps = 1e-20f;
  // out rounded to bf16 (nearest even) as fp32: the bits a RoundBf16 pass
  // over the output gives (the bf16 boundary after a norm, one launch fewer).
  bool round_bf16 = false;
  // Optional: also out's FP8 form as ActQuantFp8 (kernels/cuda/dense) makes
  // it from out, the same bits in the same launch: e4m3 codes [rows, dim]
  // (8-byte aligned) and a UE8M0 scale per 32 [rows, dim / 32]; dim % 32 ==
  // 0, out 32-byte aligned. Both or neither.
  uint8_t* codes = nullptr;
  uint8_t* scales = nullptr;
};

// Returns true if the launcher handles `params` (positive dims, dim a
// multiple of 4 for vectorized loads, non-null x/out, eps >= 0; with codes:
// scales too, dim a multiple of 32, codes 8-byte and out 32-byte aligned).
bool SupportsRmsNorm(const RmsNormParams& params);

// Enqueues the normalization on `stream`. INVALID_ARGUMENT when
// SupportsRmsNorm is false; INTERNAL with the CUDA error if the launch fails.
absl::Status RmsNorm(const RmsNormParams& params, cudaStream_t stream);

}  // namespace weir::kernels::cuda

#endif  // WEIR_KERNELS_CUDA_RMS_NORM_H_
