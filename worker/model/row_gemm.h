// worker/model/row_gemm.h
//
// RowStableGemm: y = x W^T in fp32 where every output element is computed by
// the same sequence of operations whatever the number of rows. OpenBLAS picks
// different micro-kernels (and summation orders) for different row counts, so
// a token's activations would depend on how many tokens share its forward;
// the model requires a chunked forward to equal token-by-token decoding, so
// every product whose result feeds a rounding or a discrete choice (bf16
// boundaries, top-k, expert routing) goes through this routine. (Model-local
// kernel: kernels/cpu has no batch-invariant matrix product.)
//
// Order: every y[m, n] in the row-stable order of kernels/common/row_stable.h
// (lane l sums k = l (mod 4) ascending, each product rounded before its
// addition; then (l0 + l1) + (l2 + l3)), the order the GPU's
// dense::RowStableMatmul and decode::RowStableDot reproduce bit for bit.
//
// Thread safety: pure function over caller-owned memory.

#ifndef WEIR_WORKER_MODEL_ROW_GEMM_H_
#define WEIR_WORKER_MODEL_ROW_GEMM_H_

#include <cstdint>

namespace weir::model {

// Computes y[rows, out] = x[rows, in] * w[out, in]^T. Pointers must not be
// null for positive sizes; y must not overlap x or w.
// On x86-64 machines with AVX2 (checked once at run time) the tiles use
// 256-bit registers, two outputs' lanes in one; elsewhere 128-bit ones. The
// arithmetic of every element is the same either way.
void RowStableGemm(const float* x, const float* w, float* y, int64_t rows, int64_t out,
                   int64_t in);

// The 128-bit path whatever the machine (tests compare the two paths), and
// whether RowStableGemm takes the AVX2 one here.
void RowStableGemmSse(const float* x, const float* w, float* y, int64_t rows, int64_t out,
                      int64_t in);
bool RowStableGemmUsesAvx2();

// The same product with w stored as bf16 bit patterns [out, in], widened
// exactly as they are loaded: bit for bit RowStableGemm of the widened
// weights, reading half the bytes (the model keeps a weight so when every
// value is a bf16 one: FP8, MXFP4 and bf16 checkpoint tensors). And its
// 128-bit path, for tests.
void RowStableGemmBf16W(const float* x, const uint16_t* w, float* y, int64_t rows, int64_t out,
                        int64_t in);
void RowStableGemmBf16WSse(const float* x, const uint16_t* w, float* y, int64_t rows, int64_t out,
                           int64_t in);

}  // namespace weir::model

#endif  // WEIR_WORKER_MODEL_ROW_GEMM_H_
