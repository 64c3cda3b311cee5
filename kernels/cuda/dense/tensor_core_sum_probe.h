// kernels/cuda/dense/tensor_core_sum_probe.h
//
// TensorCoreSumProbe: one 32-element K block summed three ways on Hopper's
// tensor cores, for tiles of 64 W rows x 8 X rows, so a test can compare
// their bits:
//   * mma:        the f16 pair Fp8BlockGemm's kMmaF16 runs (BlockSum: two
//                 mma.sync m16n8k16, K 0-15 from zero, then K 16-31 added);
//   * wgmma_f16:  the same two halves as wgmma m64n8k16 f16 (A in registers,
//                 the mma fragment; B by descriptor from the 128-byte
//                 swizzled ring layout), scale-d false then true;
//   * wgmma_e4m3: one wgmma m64n8k32 e4m3 (both by descriptor), the block sum
//                 of Fp8GemmMath::kWgmma.
// The operands are e4m3 codes, and the f16 paths read their exact f16
// widening, so every product is exact and only the tensor core's sum differs.
// If wgmma_f16 gives mma's bits on every input, a wgmma kernel with f16
// operands can share tiles with the mma.sync kernels without moving a bit
// (batch invariance across tile kinds); the e4m3 form is known to keep fewer
// bits (kernels/cuda/dense/README.md) and shows that the comparison sees a
// difference when there is one.
//
// Thread safety: stateless.

#ifndef WEIR_KERNELS_CUDA_DENSE_TENSOR_CORE_SUM_PROBE_H_
#define WEIR_KERNELS_CUDA_DENSE_TENSOR_CORE_SUM_PROBE_H_

#include <cstdint>

#include "absl/status/status.h"

namespace weir::kernels::cuda::dense {

inline constexpr int kProbeRows = 64;  // W rows a tile (one warpgroup)
inline constexpr int kProbeCols = 8;   // X rows a tile
inline constexpr int kProbeK = 32;     // one K block

struct TensorCoreSumProbeParams {
  int64_t tiles = 0;
  // Device pointers. w [tiles][64][32] and x [tiles][8][32] e4m3 codes (no
  // NaN code); outputs [tiles][64][8] floats, element (r, c) the sum over k
  // of w[r][k] x[c][k].
  const uint8_t* w = nullptr;
  const uint8_t* x = nullptr;
  float* mma = nullptr;
  float* wgmma_f16 = nullptr;
  float* wgmma_e4m3 = nullptr;
  // Optional: the e4m3 wgmma again with imm-scale-a = -1 (the instruction's
  // own negation of A), for comparing with the sum of the negated codes.
  float* wgmma_e4m3_neg_a = nullptr;
};

// Runs the three sums (one CTA of 128 threads a tile) and synchronizes.
// INVALID_ARGUMENT for a null pointer or tiles outside 1 .. 2^20;
// UNIMPLEMENTED off compute capability 9.0; INTERNAL with the CUDA error.
absl::Status TensorCoreSumProbe(const TensorCoreSumProbeParams& p);

}  // namespace weir::kernels::cuda::dense

#endif  // WEIR_KERNELS_CUDA_DENSE_TENSOR_CORE_SUM_PROBE_H_
