// kernels/cuda/dense/row_stable_matmul.h
//
// RowStableMatmul: y [rows, out] = act(x) [rows, in] * W^T in fp32 on the
// GPU where every output element is computed by one fixed sequence of
// operations, whatever `rows` is (the batch-invariance contract of
// worker/model/ops.h: a token's result does not depend on the other tokens of
// the call).
//
// Order: the row-stable order of kernels/common/row_stable.h for every
// y[m, n] = sum over k of x[m, k] * w[n, k] (lane l sums k = l (mod 4)
// ascending from +0, each product rounded before its addition, no FMA; then
// (l0 + l1) + (l2 + l3)). The CPU's worker/model/row_gemm.h RowStableGemm
// does the same operations in the same order, so the two agree bit for bit;
// against kernels/cpu Linear (OpenBLAS sgemm, order unspecified) they agree
// to fp32 reduction-order error.
//
// Which product to use:
//   * RowStableMatmul for Ops::Matmul and every product whose result feeds a
//     rounding or a discrete choice (bf16 storage points, top-k, routing):
//     batch invariance is part of the model's contract.
//   * GemmHandle::Matmul (gemm_handle.h, cuBLASLt) where any summation order
//     is allowed: Ops::Logits (the vocabulary head), and products whose
//     consumers tolerate row-count-dependent rounding. Measured on an H200
//     (dense_bench, fp32 in both): cuBLASLt is 1.6x (8 rows) to 3.6x (vocab
//     head, 64 rows) faster; this kernel reaches ~1.1 TB/s of weight traffic
//     at 1-4 rows and ~18 TFLOP/s (no FMA, by design) at many rows.
//
// Thread safety: stateless; safe from any thread.

#ifndef WEIR_KERNELS_CUDA_DENSE_ROW_STABLE_MATMUL_H_
#define WEIR_KERNELS_CUDA_DENSE_ROW_STABLE_MATMUL_H_

#include "absl/status/status.h"
#include "kernels/cuda/dense/matmul_params.h"

typedef struct CUstream_st* cudaStream_t;

namespace weir::kernels::cuda::dense {

// Returns true when CheckMatmulParams(params) is OK and the launch grid fits
// (out < 2^16 * 64).
bool SupportsRowStableMatmul(const MatmulParams& params);

// Enqueues, on `stream`: with fp8_activation, FakeQuant kFp8 of x into
// act_scratch; then y = act(x) W^T in the order above. No allocation.
// INVALID_ARGUMENT when unsupported (see CheckMatmulParams); INTERNAL with
// the CUDA error string if a launch fails.
absl::Status RowStableMatmul(const MatmulParams& params, cudaStream_t stream);

}  // namespace weir::kernels::cuda::dense

#endif  // WEIR_KERNELS_CUDA_DENSE_ROW_STABLE_MATMUL_H_
