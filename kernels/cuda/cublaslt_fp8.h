// kernels/cuda/cublaslt_fp8.h — the benchmarks' ceiling: cuBLASLt's FP8 GEMM
// timed on the device (fp8_gemm_bench's prefill table, decode_gpu's prefill
// MFU through tools/bench/fp8_peak.h), and its bf16 GEMM for the bf16 tiles.
//
// Thread safety: one call at a time per handle.

#ifndef WEIR_KERNELS_CUDA_CUBLASLT_FP8_H_
#define WEIR_KERNELS_CUDA_CUBLASLT_FP8_H_

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace weir::kernels::cuda {

// What cuBLASLt's FP8 GEMM needs to be timed, made once: a handle, a 64 MiB
// workspace and the device 1.0f its per-tensor scales read.
class CublasLtFp8 {
 public:
  // Null, with the reason in `*error` when given, when cuBLASLt or an
  // allocation fails.
  static std::unique_ptr<CublasLtFp8> Create(std::string* error = nullptr);
  ~CublasLtFp8();
  CublasLtFp8(const CublasLtFp8&) = delete;
  CublasLtFp8& operator=(const CublasLtFp8&) = delete;

  // Median ms (MedianMs of `reps` launches after 3) of y^T [n, m] = W [n, k]
  // x^T: TN, e4m3 x e4m3 (or both operands `in_type`: CUDA_R_16BF times
  // cuBLASLt's bf16 GEMM, the bf16 tiles' ceiling), fp32 compute, output
  // `out_type` (y holds m * n of it). A negative value when cuBLASLt has no
  // algorithm or a launch fails.
  double Ms(const void* w, const void* x, void* y, int64_t m, int64_t n, int64_t k,
            cudaDataType_t out_type, cudaStream_t stream, int reps = 10,
            cudaDataType_t in_type = CUDA_R_8F_E4M3) const;

 private:
  CublasLtFp8() = default;
  cublasLtHandle_t lt_ = nullptr;
  void* workspace_ = nullptr;
  float* one_ = nullptr;
};

}  // namespace weir::kernels::cuda

#endif  // WEIR_KERNELS_CUDA_CUBLASLT_FP8_H_
