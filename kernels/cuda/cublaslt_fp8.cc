#include "kernels/cuda/cublaslt_fp8.h"

#include "kernels/cuda/bench_util.h"

namespace weir::kernels::cuda {

double CublasLtFp8Ms(cublasLtHandle_t lt, const void* w, const void* x, void* y, int64_t m,
                     int64_t n, int64_t k, cudaDataType_t out_type, void* workspace,
                     size_t workspace_bytes, const float* one, cudaStream_t stream, int reps) {
  cublasLtMatmulDesc_t desc;
  cublasLtMatrixLayout_t a, b, c;
  if (cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F) != CUBLAS_STATUS_SUCCESS) {
    return -1;
  }
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta));
  cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb));
  cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &one, sizeof(one));
  cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &one, sizeof(one));
  cublasLtMatrixLayoutCreate(&a, CUDA_R_8F_E4M3, k, n, k);
  cublasLtMatrixLayoutCreate(&b, CUDA_R_8F_E4M3, k, m, k);
  cublasLtMatrixLayoutCreate(&c, out_type, n, m, n);
  cublasLtMatmulPreference_t pref;
  cublasLtMatmulPreferenceCreate(&pref);
  const uint64_t ws = workspace_bytes;
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                       sizeof(ws));
  cublasLtMatmulHeuristicResult_t result;
  int found = 0;
  double ms = -1;
  if (cublasLtMatmulAlgoGetHeuristic(lt, desc, a, b, c, c, pref, 1, &result, &found) ==
          CUBLAS_STATUS_SUCCESS &&
      found > 0) {
    const float alpha = 1.0f, beta = 0.0f;
    bool ok = true;
    ms = MedianMs(
        [&] {
          ok &= cublasLtMatmul(lt, desc, &alpha, w, a, x, b, &beta, y, c, y, c, &result.algo,
                               workspace, workspace_bytes, stream) == CUBLAS_STATUS_SUCCESS;
        },
        stream, reps);
    if (!ok) ms = -1;
  }
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatrixLayoutDestroy(a);
  cublasLtMatrixLayoutDestroy(b);
  cublasLtMatrixLayoutDestroy(c);
  cublasLtMatmulDescDestroy(desc);
  return ms;
}

}  // namespace weir::kernels::cuda
