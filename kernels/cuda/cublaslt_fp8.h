// kernels/cuda/cublaslt_fp8.h — the benchmarks' ceiling: cuBLASLt's FP8 GEMM
// timed on the device (fp8_gemm_bench's prefill table, decode_gpu's prefill
// MFU through tools/bench/fp8_peak.h).
//
// Thread safety: one call at a time per handle.

#ifndef WEIR_KERNELS_CUDA_CUBLASLT_FP8_H_
#define WEIR_KERNELS_CUDA_CUBLASLT_FP8_H_

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace weir::kernels::cuda {

// Median ms (MedianMs of `reps` launches after 3) of cuBLASLt's FP8 GEMM
// y^T [n, m] = W [n, k] x^T: TN, e4m3 x e4m3, fp32 compute, output `out_type`
// (y holds m * n of it), per-tensor scales read from `one` (a device float
// 1.0). A negative value when cuBLASLt has no algorithm or a launch fails.
double CublasLtFp8Ms(cublasLtHandle_t lt, const void* w, const void* x, void* y, int64_t m,
                     int64_t n, int64_t k, cudaDataType_t out_type, void* workspace,
                     size_t workspace_bytes, const float* one, cudaStream_t stream, int reps = 10);

}  // namespace weir::kernels::cuda

#endif  // WEIR_KERNELS_CUDA_CUBLASLT_FP8_H_
