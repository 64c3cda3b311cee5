#include "kernels/cuda/cublaslt_fp8.h"

#include "kernels/cuda/bench_util.h"

namespace weir::kernels::cuda {
namespace {

constexpr size_t kWorkspaceBytes = size_t{64} << 20;

}  // namespace

std::unique_ptr<CublasLtFp8> CublasLtFp8::Create(std::string* error) {
  std::unique_ptr<CublasLtFp8> t(new CublasLtFp8());
  auto fail = [&](const std::string& why) -> std::unique_ptr<CublasLtFp8> {
    cudaGetLastError();
    if (error != nullptr) *error = why;
    return nullptr;
  };
  if (cublasLtCreate(&t->lt_) != CUBLAS_STATUS_SUCCESS) {
    t->lt_ = nullptr;
    return fail("cublasLtCreate failed");
  }
  if (cudaMalloc(&t->workspace_, kWorkspaceBytes) != cudaSuccess ||
      cudaMalloc(&t->one_, sizeof(float)) != cudaSuccess) {
    return fail("cuBLASLt workspace: cudaMalloc failed");
  }
  const float one = 1.0f;
  if (cudaMemcpy(t->one_, &one, sizeof(one), cudaMemcpyHostToDevice) != cudaSuccess) {
    return fail("cuBLASLt scale: cudaMemcpy failed");
  }
  return t;
}

CublasLtFp8::~CublasLtFp8() {
  cudaDeviceSynchronize();
  if (lt_ != nullptr) cublasLtDestroy(lt_);
  cudaFree(workspace_);
  cudaFree(one_);
}

double CublasLtFp8::Ms(const void* w, const void* x, void* y, int64_t m, int64_t n, int64_t k,
                       cudaDataType_t out_type, cudaStream_t stream, int reps,
                       cudaDataType_t in_type) const {
  cublasLtHandle_t lt = lt_;
  void* const workspace = workspace_;
  const size_t workspace_bytes = kWorkspaceBytes;
  const float* one = one_;
  cublasLtMatmulDesc_t desc;
  cublasLtMatrixLayout_t a, b, c;
  if (cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F) != CUBLAS_STATUS_SUCCESS) {
    return -1;
  }
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta));
  cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb));
  if (in_type == CUDA_R_8F_E4M3) {  // per-tensor scales of 1 (FP8 only)
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &one, sizeof(one));
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &one, sizeof(one));
  }
  cublasLtMatrixLayoutCreate(&a, in_type, k, n, k);
  cublasLtMatrixLayoutCreate(&b, in_type, k, m, k);
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
