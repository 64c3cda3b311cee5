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

}  // namespace weir::kernels::cuda::dense

#endif  // WEIR_KERNELS_CUDA_DENSE_BF16_GEMM_SM90_H_
