// kernels/cpu/rms_norm.h
//
// RMSNorm over the last dimension (spec §4.3, §4.6; V4.1 eps = 1e-20):
//   y[r, i] = weight[i] * (x[r, i] * rsqrt(mean_i(x[r, i]^2) + eps))
// The sum of squares is accumulated in double in the kernels/common/fmath.h
// LaneSum order (the order a CUDA warp reproduces) and rounded to fp32 once, then
// var = sum / dim and r = 1 / sqrt(var + eps) in fp32; the two products are
// rounded separately in the order shown (the reference's order).
//
// Thread safety: pure function over caller-owned memory.

#ifndef WEIR_KERNELS_CPU_RMS_NORM_H_
#define WEIR_KERNELS_CPU_RMS_NORM_H_

#include <cstdint>
#include <span>

#include "absl/status/status.h"

namespace weir::kernels::cpu {

// V4.1 `norm_eps` (rms_norm_eps); the hyper-connection eps is separate.
inline constexpr float kV41NormEps = 1e-20f;

struct RmsNormArgs {
  std::span<const float> x;       // [rows, dim]
  std::span<const float> weight;  // [dim]; empty means all ones
  std::span<float> out;           // [rows, dim]; may alias x exactly
  int64_t rows = 0;
  int64_t dim = 0;
  float eps = kV41NormEps;
};

// Normalizes every row of `args.x` into `args.out`. Returns INVALID_ARGUMENT
// if dims are not positive, eps is negative, or a span size mismatches.
absl::Status RmsNorm(const RmsNormArgs& args);

}  // namespace weir::kernels::cpu

#endif  // WEIR_KERNELS_CPU_RMS_NORM_H_
