// kernels/cuda/rope.h
//
// ApplyRope on the GPU: the CUDA backend of kernels/cpu/rope.h. Rotates the
// last rope_dim dims of every head vector as adjacent (2i, 2i+1) pairs by
// angle fl(fl(pos) * f_i), with the frequency table of kernels/cpu::RopeTable
// copied to the device. Products are rounded one by one (no FMA) as on the
// CPU. With `cos_sin` (the CPU's cpu::RopeCosSin values uploaded, per token
// or as a table by position) the result is bit-identical to the CPU reference; with only `freqs`, cosf/sinf are
// CUDA's (within 2 ulp of libm) and results match to a few ulp.
//
// Thread safety: stateless; safe from any thread.

#ifndef WEIR_KERNELS_CUDA_ROPE_H_
#define WEIR_KERNELS_CUDA_ROPE_H_

#include <cstdint>

#include "absl/status/status.h"

typedef struct CUstream_st* cudaStream_t;

namespace weir::kernels::cuda {

struct RopeParams {
  float* x = nullptr;                // device [num_tokens, num_heads, head_dim], in place
  const int64_t* positions = nullptr;  // device [num_tokens], >= 0
  const float* freqs = nullptr;      // device [rope_dim / 2] (RopeTable::freqs())
  // device [num_tokens, rope_dim / 2, 2] (cos, sin) from cpu::RopeCosSin, or
  // null; takes precedence over freqs (which may then be null). With
  // cos_sin_by_position: a table [cos_sin_rows, rope_dim / 2, 2] holding
  // cpu::RopeCosSin of positions 0 .. cos_sin_rows - 1, and token t uses its
  // row positions[t] (so one table uploaded once serves every step).
  const float* cos_sin = nullptr;
  int64_t num_tokens = 0;
  int num_heads = 0;
  int head_dim = 0;
  int rope_dim = 64;
  bool inverse = false;              // the conjugate rotation (spec §4.3.7)
  // Index cos_sin by position instead of by token (see cos_sin). A position
  // outside [0, cos_sin_rows) cannot be checked on the host: that token's
  // rotated dims become NaN (the other dims are left as they are).
  bool cos_sin_by_position = false;
  int64_t cos_sin_rows = 0;          // rows of the table when cos_sin_by_position
  // The rotated elements rounded to bf16 (nearest even) as fp32; the other
  // elements are not touched, so on an x already rounded this gives the bits
  // of a RoundBf16 pass over x after the rotation (one launch fewer).
  bool round_bf16 = false;
};

// True for positive sizes, an even rope_dim <= head_dim, non-null x and
// positions, and freqs or cos_sin; with cos_sin_by_position, a non-null
// cos_sin and cos_sin_rows > 0.
bool SupportsRope(const RopeParams& params);

// Enqueues the rotation on `stream`. INVALID_ARGUMENT when unsupported;
// INTERNAL with the CUDA error if the launch fails.
absl::Status ApplyRope(const RopeParams& params, cudaStream_t stream);

}  // namespace weir::kernels::cuda

#endif  // WEIR_KERNELS_CUDA_ROPE_H_
