// kernels/cuda/moe/mxfp4_bf16_gemm_sm90.h
//
// Mxfp4Bf16GroupedGemm: the routed experts' grouped product for a prompt's
// rows on the bf16 maths (Mxfp4Bf16GroupedGemmParams in
// mxfp4_grouped_gemm_params.h): per local expert e and row r of it,
//   y[r, :] = X[r, :] W_e^T,  W_e = the expert's MXFP4 weight widened to bf16
//             (Mxfp4WeightBf16Bits, element by element), X in bf16,
// with dense::Bf16Gemm's arithmetic on its warp-specialized tile:
//   acc = +0
//   for s = 0, 1, ..., k/16 - 1 (ascending, never split):
//     acc = the tensor core's fp32 sum of acc and the 16 products of step s
//   y = acc (fp32), bf16(acc) rounded to nearest even (kBf16), or that
//       value held as fp32 (kF32RoundedBf16).
// So y has, row for row, the bits dense::Bf16Gemm (tile kN128M128Ws) gives
// over the same X row and the widened weight (the GPU test compares them),
// and a row's bits depend on nothing but its X row and its expert's weight.
// Products of bf16 values are exact in fp32; against the exact product of the
// operands' values the test bounds |y - exact| <= (1e-6 + (k/16) 2^-22)
// sum_k |x_k w_k| (Bf16Gemm's bound).
//
// Why it exists: the FP8 maths of a prefill chunk's experts converts the
// MXFP4 weights to FP8 tiles each chunk and folds every 32-block's sum with
// two scales, which caps it near half the FP8 rate; this route widens the
// codes inside the product's own stages (no conversion pass, no bytes
// written) and runs at the bf16 rate with no fold. Rows keep the role maths
// of dense::Bf16GemmParams::row_role, so a step may run it for its prompt's
// rows beside the FP8 kernels for its generated rows.
//
// Thread safety: stateless; safe from any thread.

#ifndef WEIR_KERNELS_CUDA_MOE_MXFP4_BF16_GEMM_SM90_H_
#define WEIR_KERNELS_CUDA_MOE_MXFP4_BF16_GEMM_SM90_H_

#include "absl/status/status.h"
#include "kernels/cuda/moe/mxfp4_grouped_gemm_params.h"

typedef struct CUstream_st* cudaStream_t;

namespace weir::kernels::cuda {

// Enqueues the product on `stream`. Allocates nothing and never
// synchronizes (the expert offsets stay on the device), so it may be captured
// into a CUDA graph. Returns INVALID_ARGUMENT as
// CheckMxfp4Bf16GroupedGemmParams; UNIMPLEMENTED when the current device is
// not compute capability 9.x; INTERNAL if the tensor map or the launch fails.
// rows == 0 enqueues nothing.
absl::Status Mxfp4Bf16GroupedGemm(const Mxfp4Bf16GroupedGemmParams& params, cudaStream_t stream);

}  // namespace weir::kernels::cuda

#endif  // WEIR_KERNELS_CUDA_MOE_MXFP4_BF16_GEMM_SM90_H_
