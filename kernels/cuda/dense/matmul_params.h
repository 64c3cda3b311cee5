// kernels/cuda/dense/matmul_params.h
//
// MatmulParams: the arguments of the dense fp32 products of this package,
// y [rows, out] = act(x) [rows, in] * W^T, W [out, in] (worker/model/ops.h
// DenseWeight: the exact fp32 values of the stored weight), where act is the
// FP8 fake-quant (e4m3, 32-blocks along `in`, UE8M0; FakeQuant kFp8) when
// fp8_activation and the identity otherwise. Two implementations share it:
//   RowStableMatmul (row_stable_matmul.h)  fixed summation order, batch-invariant
//   GemmHandle::Matmul (gemm_handle.h)     cuBLASLt, fp32 compute, order unspecified
//
// Thread safety: plain data and pure functions.

#ifndef WEIR_KERNELS_CUDA_DENSE_MATMUL_PARAMS_H_
#define WEIR_KERNELS_CUDA_DENSE_MATMUL_PARAMS_H_

#include <cstdint>

#include "absl/status/status.h"

namespace weir::kernels::cuda::dense {

struct MatmulParams {
  const float* x = nullptr;  // device [rows, in], row-major
  const float* w = nullptr;  // device [out, in], row-major
  float* y = nullptr;        // device [rows, out]; must not overlap x, w or act_scratch
  int64_t rows = 0;
  int64_t out = 0;
  int64_t in = 0;
  // Quantize the activation to FP8 (blocks of 32 along `in`) before the product.
  bool fp8_activation = false;
  // Device scratch of MatmulScratchFloats(rows, in, fp8_activation) floats
  // that receives act(x); may be null when fp8_activation is false. Must not
  // overlap x or w.
  float* act_scratch = nullptr;
};

// True when the float ranges [a, a + a_floats) and [b, b + b_floats) share
// a byte; false when either pointer is null. Pointers are not dereferenced.
bool FloatRangesOverlap(const float* a, int64_t a_floats, const float* b, int64_t b_floats);

// Returns the number of floats act_scratch must hold: rows * in with
// fp8_activation, 0 without.
int64_t MatmulScratchFloats(int64_t rows, int64_t in, bool fp8_activation);

// Returns OK when `params` can run: positive dims, rows, out and in each
// below 2^31, non-null x, w and y, and with fp8_activation, in a multiple of
// 32 and a non-null act_scratch; the ranges of y, x, w and act_scratch must
// not overlap. INVALID_ARGUMENT (naming the problem) otherwise. Pointers are
// not dereferenced.
absl::Status CheckMatmulParams(const MatmulParams& params);

}  // namespace weir::kernels::cuda::dense

#endif  // WEIR_KERNELS_CUDA_DENSE_MATMUL_PARAMS_H_
