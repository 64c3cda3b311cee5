// kernels/cuda/moe/bf16_split.h
//
// Bf16Split: fp32 rows as the operands of ONE bf16 GEMM whose fp32 sums are
// hi x hi + hi x lo + lo x hi of the fp32 product (the gate logits' tensor-core
// form, kernels/cuda/moe/README.md item 8). Each value x splits exactly into
// hi = bf16(x) (nearest even) and the remainder x - hi (exact in fp32),
// rounded to bf16 as lo; a row of `cols` becomes 3 x cols bf16 values along
// K: [hi | hi | lo] for the activations' side and [hi | lo | hi] for the
// weights' side, so K's three thirds pair hi.hi, hi.lo and lo.hi. Dropped:
// lo.lo (about 2^-16 of a product) and lo's own rounding (about 2^-17), so a
// product carries about 2^-16 relative error against fp32's 2^-24.
//
// Thread safety: stateless; any thread, any stream.

#ifndef WEIR_KERNELS_CUDA_MOE_BF16_SPLIT_H_
#define WEIR_KERNELS_CUDA_MOE_BF16_SPLIT_H_

#include <cstdint>

#include "absl/status/status.h"

typedef struct CUstream_st* cudaStream_t;

namespace weir::kernels::cuda {

struct Bf16SplitParams {
  const float* x = nullptr;  // device [rows, cols]
  uint16_t* out = nullptr;   // device [rows, 3 cols] bf16 bits; must not overlap x
  int64_t rows = 0;
  int64_t cols = 0;
  // false: [hi | hi | lo] (the activations' side); true: [hi | lo | hi].
  bool weight_side = false;
};

// True for rows, cols > 0, rows * cols < 2^40 and non-null arrays.
bool SupportsBf16Split(const Bf16SplitParams& params);

// Enqueues the split on `stream`. INVALID_ARGUMENT when unsupported;
// INTERNAL on launch failure.
absl::Status Bf16Split(const Bf16SplitParams& params, cudaStream_t stream);

}  // namespace weir::kernels::cuda

#endif  // WEIR_KERNELS_CUDA_MOE_BF16_SPLIT_H_
