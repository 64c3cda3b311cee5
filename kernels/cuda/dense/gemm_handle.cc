#include "kernels/cuda/dense/gemm_handle.h"

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/dense/fake_quant.h"

namespace weir::kernels::cuda::dense {
namespace {

static_assert(sizeof(cublasLtMatmulAlgo_t) == 8 * sizeof(uint64_t));

absl::Status LtError(const char* what, cublasStatus_t status) {
  return absl::InternalError(absl::StrCat("GemmHandle: ", what, ": ",
                                          cublasLtGetStatusString(status)));
}

#define WEIR_LT_CALL(what, call)                           \
  do {                                                     \
    if (cublasStatus_t s_ = (call); s_ != CUBLAS_STATUS_SUCCESS) return LtError(what, s_); \
  } while (0)

// The largest power of two (up to 256) dividing the address: what cuBLASLt
// may assume about the pointer.
int Alignment(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  int align = 256;
  while (align > 4 && a % align != 0) align /= 2;
  return align;
}

}  // namespace

absl::StatusOr<std::unique_ptr<GemmHandle>> GemmHandle::Create(size_t workspace_bytes) {
  cublasLtHandle_t lt = nullptr;
  if (cublasStatus_t s = cublasLtCreate(&lt); s != CUBLAS_STATUS_SUCCESS) {
    return LtError("cublasLtCreate", s);
  }
  void* workspace = nullptr;
  if (workspace_bytes > 0) {
    if (cudaError_t err = cudaMalloc(&workspace, workspace_bytes); err != cudaSuccess) {
      cublasLtDestroy(lt);
      return absl::InternalError(
          absl::StrCat("GemmHandle: workspace cudaMalloc: ", cudaGetErrorString(err)));
    }
  }
  return std::unique_ptr<GemmHandle>(new GemmHandle(lt, workspace, workspace_bytes));
}

GemmHandle::~GemmHandle() {
  if (workspace_ != nullptr) cudaFree(workspace_);
  cublasLtDestroy(lt_);
}

absl::Status GemmHandle::Matmul(const MatmulParams& p, cudaStream_t stream) {
  if (absl::Status s = CheckMatmulParams(p); !s.ok()) return s;
  const float* x = nullptr;
  if (absl::Status s = Fp8ActivationInput(p.x, p.act_scratch, p.rows * p.in, p.fp8_activation,
                                          &x, stream);
      !s.ok()) {
    return s;
  }
  // Column-major view: y^T [out, rows] = (W^T)^T [out, in] * x^T [in, rows],
  // W^T stored as [in, out] (ld in), x^T as [in, rows] (ld in), y^T ld out.
  cublasLtMatmulDescOpaque_t desc_storage;
  cublasLtMatrixLayoutOpaque_t a_storage, b_storage, c_storage;
  cublasLtMatmulDesc_t desc = &desc_storage;
  cublasLtMatrixLayout_t a = &a_storage, b = &b_storage, c = &c_storage;
  WEIR_LT_CALL("MatmulDescInit", cublasLtMatmulDescInit(desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t trans_a = CUBLAS_OP_T, trans_b = CUBLAS_OP_N;
  WEIR_LT_CALL("TRANSA", cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA,
                                                        &trans_a, sizeof(trans_a)));
  WEIR_LT_CALL("TRANSB", cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB,
                                                        &trans_b, sizeof(trans_b)));
  WEIR_LT_CALL("layout W", cublasLtMatrixLayoutInit(a, CUDA_R_32F, p.in, p.out, p.in));
  WEIR_LT_CALL("layout x", cublasLtMatrixLayoutInit(b, CUDA_R_32F, p.in, p.rows, p.in));
  WEIR_LT_CALL("layout y", cublasLtMatrixLayoutInit(c, CUDA_R_32F, p.out, p.rows, p.out));

  const Key key{p.out, p.rows, p.in, Alignment(x), Alignment(p.w), Alignment(p.y)};
  auto it = algos_.find(key);
  if (it == algos_.end()) {
    cublasLtMatmulPreferenceOpaque_t pref_storage;
    cublasLtMatmulPreference_t pref = &pref_storage;
    WEIR_LT_CALL("PreferenceInit", cublasLtMatmulPreferenceInit(pref));
    const uint64_t bytes = workspace_bytes_;
    WEIR_LT_CALL("workspace pref",
                 cublasLtMatmulPreferenceSetAttribute(
                     pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &bytes, sizeof(bytes)));
    const uint32_t align_a = key.align_w, align_b = key.align_x, align_c = key.align_y;
    WEIR_LT_CALL("align A", cublasLtMatmulPreferenceSetAttribute(
                                pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a,
                                sizeof(align_a)));
    WEIR_LT_CALL("align B", cublasLtMatmulPreferenceSetAttribute(
                                pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b,
                                sizeof(align_b)));
    WEIR_LT_CALL("align C", cublasLtMatmulPreferenceSetAttribute(
                                pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_c,
                                sizeof(align_c)));
    WEIR_LT_CALL("align D", cublasLtMatmulPreferenceSetAttribute(
                                pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_c,
                                sizeof(align_c)));
    cublasLtMatmulHeuristicResult_t result;
    int found = 0;
    WEIR_LT_CALL("AlgoGetHeuristic", cublasLtMatmulAlgoGetHeuristic(
                                         lt_, desc, a, b, c, c, pref, 1, &result, &found));
    if (found == 0) {
      return absl::InternalError(absl::StrCat("GemmHandle: no cuBLASLt algorithm for out ",
                                              p.out, " rows ", p.rows, " in ", p.in));
    }
    Algo algo;
    std::memcpy(algo.data(), &result.algo, sizeof(algo));
    it = algos_.emplace(key, algo).first;
  }
  cublasLtMatmulAlgo_t algo;
  std::memcpy(&algo, it->second.data(), sizeof(algo));
  const float alpha = 1.0f, beta = 0.0f;
  WEIR_LT_CALL("Matmul", cublasLtMatmul(lt_, desc, &alpha, p.w, a, x, b, &beta, p.y, c, p.y, c,
                                        &algo, workspace_, workspace_bytes_, stream));
  return absl::OkStatus();
}

}  // namespace weir::kernels::cuda::dense
