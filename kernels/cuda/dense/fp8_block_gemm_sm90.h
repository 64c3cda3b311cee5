// kernels/cuda/dense/fp8_block_gemm_sm90.h
//
// Fp8BlockGemm: Y [m, n] = X [m, k] * W [n, k]^T on Hopper tensor cores
// (mma.sync; e4m3 fragments widened exactly to f16, fp32 accumulation), with
// both operands in V4.1's stored form — the `fast` numerics path of the dense
// linears (spec §4.9):
//   W: e4m3 codes [n, k] + one UE8M0 scale per 32 x 32 tile
//      [ceil(n/32), k/32] (kernels/cpu/linear.h kFp8, weight_quant.h);
//   X: e4m3 codes [m, k] + one UE8M0 scale per row and 32 of K [m, k/32]
//      (the reference's act_quant; ActQuantFp8 in act_quant_fp8.h makes it).
//
// Arithmetic, per output element (identical for every tile and every m):
//   acc = +0
//   for kb = 0, 1, ..., k/32 - 1 (ascending, never split):
//     p   = the tensor core's fp32 sum of e4m3(x[m, 32kb + i]) * e4m3(w[n, 32kb + i]),
//           i = 0..31: one m16n8k16 f16 mma over i < 16 from a zero
//           accumulator, then one over i >= 16 accumulating onto it
//     acc = fma(p, e8m0(sx[m, kb]) * e8m0(sw[n/32, kb]), acc)
//   y = acc (fp32), or bf16(acc) rounded to nearest even.
// The scale product is exact (powers of two), so each step rounds once.
//
// With k_splits > 1 (Fp8BlockGemmParams), the loop above runs over each
// split's K blocks into its own acc, and y = ((acc_0 + acc_1) + ...) in split
// order, then bf16 if asked: a fixed order too, chosen per weight shape.
//
// Batch invariance: a row's output depends only on that row of X, on W and
// on k_splits, never on m or on the other rows (one fixed order). Every tile
// of fp8_block_gemm_params.h runs the same arithmetic; the test compares them
// bit for bit.
//
// Accuracy against the exact product of the dequantized operands: products
// are exact (e4m3 values are f16 values; f16 products fit fp32), each block
// sum p rounds at fp32 precision (1 + 2^-18 is kept, measured), and the fold
// adds at most (k/32) roundings of 2^-24 of the running sum. The test checks
// |y - exact| <= (1e-5 + (k/32) 2^-24) sum_k |x_k w_k|; measured worst 7e-7.
// (Hopper has no FP8 mma.sync datapath: ptxas expands the e4m3 m16n8k32 form
// into this same f16 pair; wgmma's native FP8 sum keeps fewer bits.)
// Scales whose product leaves the fp32 normal range (codes summing below
// 2 * 127 - 126) lose bits; V4.1's never do. A block with the NaN scale 0xFF
// or a NaN code makes its outputs NaN.
//
// Decode: up to 64 rows one CTA row covers all of X, so each weight byte is
// read from memory once per call. Without split-K the grid has n / 16 warps,
// so small n cannot fill the GPU (README "Measurements"); ChooseFp8GemmSplits
// picks the split that fills it. Prefill: 128 x 128
// tiles at the mma.sync f16 rate, well below wgmma FP8 (README).
//
// Thread safety: stateless; safe from any thread.

#ifndef WEIR_KERNELS_CUDA_DENSE_FP8_BLOCK_GEMM_SM90_H_
#define WEIR_KERNELS_CUDA_DENSE_FP8_BLOCK_GEMM_SM90_H_

#include "absl/status/status.h"
#include "kernels/cuda/dense/fp8_block_gemm_params.h"

typedef struct CUstream_st* cudaStream_t;

namespace weir::kernels::cuda::dense {

// Enqueues Y = X W^T (header comment) on `stream`. Allocates nothing and never
// synchronizes, so it may be captured into a CUDA graph. Does not take
// ownership of any pointer; all must stay valid until the work completes.
// Returns INVALID_ARGUMENT as CheckFp8BlockGemmParams; UNIMPLEMENTED when the
// current device is not compute capability 9.x (the kernel is built for
// sm_90a only); INTERNAL with the CUDA error if a launch fails.
absl::Status Fp8BlockGemm(const Fp8BlockGemmParams& params, cudaStream_t stream);

// The f16 panel of FP8 codes (Fp8GemmF16PanelColumn's order) that the
// warp-specialized prefill tile reads as Fp8BlockGemmParams::x_f16: one
// thread a 16-byte chunk of codes, 3 bytes an element of traffic. A
// product over the same codes may reuse it; the codes must not change
// in between.
absl::Status WidenFp8ToF16Panel(const Fp8F16PanelParams& params, cudaStream_t stream);

}  // namespace weir::kernels::cuda::dense

#endif  // WEIR_KERNELS_CUDA_DENSE_FP8_BLOCK_GEMM_SM90_H_
