// kernels/cuda/dense/bf16_gemm_cutlass.h
//
// Bf16GemmCutlass: Bf16Gemm's product (bf16_gemm_params.h: Y [m, n] =
// X [m, k] * W [n, k]^T, X and W in bf16, fp32 sums) on CUTLASS's Hopper GEMM
// (the pinned CUTLASS 4.2 headers): a 128 x 256 x 64 tile (or 128 x 128 x 64,
// Bf16GemmParams::cutlass_tile_n), TMA loads
// multicast over a cluster of two CTAs, two consumer warpgroups of
// wgmma m64n256k16, persistent data-parallel tiles (never split-K or
// stream-K). Each element is one fp32 chain over K in order, a wgmma of 16
// products a step, so a row's bits depend on its X row and W alone and equal
// Bf16Gemm's unsplit warp-specialized tile's (bf16_gemm_cutlass_test).
//
// Takes the calls Bf16GemmCutlassTakes accepts (the prompt's bf16 products
// of the EP8 chunk: one X and W pair or groups of them, fp32, rounded fp32
// (an epilogue rounding each sum to bf16) or bf16 output); the others stay with Bf16Gemm. A choice
// of speed where it takes a call: against Bf16Gemm's 0.43 - 0.64 of cuBLASLt's bf16 GEMM on V4.1's
// prefill shapes (H100, thirty-seventh session).
//
// Thread safety: stateless; any thread, any stream.

#ifndef WEIR_KERNELS_CUDA_DENSE_BF16_GEMM_CUTLASS_H_
#define WEIR_KERNELS_CUDA_DENSE_BF16_GEMM_CUTLASS_H_

#include "absl/status/status.h"
#include "kernels/cuda/dense/bf16_gemm_params.h"

typedef struct CUstream_st* cudaStream_t;

namespace weir::kernels::cuda::dense {

// Enqueues the product on `stream`. INVALID_ARGUMENT where
// CheckBf16GemmParams refuses `params` or Bf16GemmCutlassTakes is false;
// UNIMPLEMENTED off sm_90; INTERNAL with CUTLASS's or CUDA's status when the
// kernel cannot be set up or launched.
absl::Status Bf16GemmCutlass(const Bf16GemmParams& params, cudaStream_t stream);

}  // namespace weir::kernels::cuda::dense

#endif  // WEIR_KERNELS_CUDA_DENSE_BF16_GEMM_CUTLASS_H_
