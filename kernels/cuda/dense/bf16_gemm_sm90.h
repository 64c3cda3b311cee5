// kernels/cuda/dense/bf16_gemm_sm90.h
//
// Bf16Gemm: Y [m, n] = X [m, k] * W [n, k]^T on Hopper tensor cores
// (mma.sync m16n8k16 bf16, fp32 accumulation) with both operands in bf16 —
// the `fast` numerics path of V4.1's bf16 linears (the grouped `wo_a`, the
// head, the compressor and indexer projections): the weights stay in their
// stored bf16 form on the device, half the bytes of the reference's fp32
// copy, and the product runs on tensor cores instead of fp32 FMA.
//
// Arithmetic, per output element (identical for every tile, every m and every
// group count):
//   acc = +0
//   for s = 0, 1, ..., ceil(k/16) - 1 (ascending; split-K below):
//     acc = the tensor core's fp32 sum of acc and x[m, 16s + i] * w[n, 16s + i],
//           i = 0..15 (elements past k are zero)
//   y = acc (fp32), or bf16(acc) rounded to nearest even.
// Products of bf16 values are exact in fp32; the per-step sum rounds at
// about fp32 precision. Against the exact product the test bounds
// |y - exact| <= (1e-6 + ceil(k/16) 2^-22) sum_k |x_k w_k|.
//
// With k_splits > 1 (Bf16GemmParams) the loop above runs over each split's
// stages into its own acc (from +0), and y = ((acc_0 + acc_1) + ...) in
// split order, then the output's rounding; the bound above still holds.
//
// Batch invariance: a row's output depends only on that row of X, on W and
// on k_splits (chosen from W's shape, ChooseBf16GemmSplits; one fixed order);
// the tiles of fp8_block_gemm_params.h all run the same arithmetic (the test
// compares them bit for bit).
//
// Thread safety: stateless; safe from any thread.

#ifndef WEIR_KERNELS_CUDA_DENSE_BF16_GEMM_SM90_H_
#define WEIR_KERNELS_CUDA_DENSE_BF16_GEMM_SM90_H_

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/cuda/dense/bf16_gemm_params.h"

typedef struct CUstream_st* cudaStream_t;

namespace weir::kernels::cuda::dense {

// Enqueues Y = X W^T for every group (header comment) on `stream`.
// Allocates nothing and never synchronizes, so it may be captured into a CUDA
// graph. Returns INVALID_ARGUMENT as CheckBf16GemmParams; UNIMPLEMENTED when
// the current device is not compute capability 9.x; INTERNAL with the CUDA
// error if a launch fails.
absl::Status Bf16Gemm(const Bf16GemmParams& params, cudaStream_t stream);

// The bf16 bits of an FP8 weight (Bf16GemmParams::w_codes' form) for every
// group: out[g][r][c] = bf16(e4m3(codes[g][r][c]) x 2^(scales[g][r / 32][c /
// 32] - 127)), nearest even, the bits Bf16Gemm's w_codes path widens to (so a
// product over `out` equals one over the codes, bit for bit). The decoder's
// prefill runs the warp-specialized tile over this instead of the codes.
struct Fp8WeightBf16Params {
  const uint8_t* codes = nullptr;   // device [groups][rows, cols] e4m3, 8-byte aligned
  const uint8_t* scales = nullptr;  // device [groups][ceil(rows / 32), cols / 32] UE8M0
  uint16_t* out = nullptr;          // device [groups][rows, cols] bf16 bits, 16-byte aligned
  int64_t rows = 0;
  int64_t cols = 0;  // a multiple of 32
  int groups = 1;
  int64_t code_group_stride = 0;   // bytes; 0: packed (rows x cols)
  int64_t scale_group_stride = 0;  // bytes; 0: packed
};

// Enqueues the widening on `stream` (graph-capturable, no allocation).
// INVALID_ARGUMENT for the shapes and pointers its params comment excludes;
// INTERNAL if the launch fails.
absl::Status Fp8WeightBf16(const Fp8WeightBf16Params& params, cudaStream_t stream);

}  // namespace weir::kernels::cuda::dense

#endif  // WEIR_KERNELS_CUDA_DENSE_BF16_GEMM_SM90_H_
