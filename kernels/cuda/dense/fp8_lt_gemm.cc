#include "kernels/cuda/dense/fp8_lt_gemm.h"

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/dense/fp8_reblock_ref.h"

namespace weir::kernels::cuda::dense {

// Descriptors live here, initialized in place by cuBLASLt (no allocation);
// the Plan never moves (the map holds it by pointer).
struct Fp8LtGemm::Plan {
  cublasLtMatmulDescOpaque_t desc;
  cublasLtMatrixLayoutOpaque_t w_layout;
  cublasLtMatmulAlgo_t algo;
};

namespace {

absl::Status LtError(const std::string& what, cublasStatus_t status) {
  return absl::InternalError(
      absl::StrCat("Fp8LtGemm: ", what, ": ", cublasLtGetStatusString(status)));
}

#define WEIR_FP8_LT_CALL(what, call)                                                       \
  do {                                                                                     \
    if (cublasStatus_t s_ = (call); s_ != CUBLAS_STATUS_SUCCESS) return LtError(what, s_); \
  } while (0)

// 16 bytes: what cuBLASLt documents for FP8 operands and block scales; the
// heuristic is told so, so the algorithm never depends on how much more the
// buffers of the first call happened to be aligned.
constexpr uint32_t kAlignment = 16;

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % kAlignment == 0; }

cudaDataType_t OutputType(Fp8GemmOutput output) {
  return output == Fp8GemmOutput::kBf16 ? CUDA_R_16BF : CUDA_R_32F;
}

template <typename T>
cublasStatus_t SetDesc(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr,
                       const T& value) {
  return cublasLtMatmulDescSetAttribute(desc, attr, &value, sizeof(value));
}

template <typename T>
cublasStatus_t SetPref(cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr,
                       const T& value) {
  return cublasLtMatmulPreferenceSetAttribute(pref, attr, &value, sizeof(value));
}

// Points the descriptor at this call's scales (host-side attributes: read by
// cublasLtMatmul when it enqueues, so a captured graph keeps these).
absl::Status SetScalePointers(cublasLtMatmulDesc_t desc, const Fp8LtGemmParams& p) {
  const void* a_scales = p.w_scales;  // A = W
  const void* b_scales = p.x_scales;  // B = X^T
  WEIR_FP8_LT_CALL("A_SCALE_POINTER",
                   SetDesc(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, a_scales));
  WEIR_FP8_LT_CALL("B_SCALE_POINTER",
                   SetDesc(desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, b_scales));
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckFp8LtGemmParams(const Fp8LtGemmParams& p) {
  const std::pair<const void*, const char*> pointers[] = {
      {p.x, "x"}, {p.x_scales, "x_scales"}, {p.w, "w"}, {p.w_scales, "w_scales"}, {p.y, "y"}};
  for (const auto& [pointer, name] : pointers) {
    if (pointer == nullptr)
      return absl::InvalidArgumentError(absl::StrCat("Fp8LtGemm: ", name, " is null"));
    if (!Aligned16(pointer)) {
      return absl::InvalidArgumentError(absl::StrCat("Fp8LtGemm: ", name, " not 16-byte aligned"));
    }
  }
  if (p.workspace != nullptr && !Aligned16(p.workspace)) {
    return absl::InvalidArgumentError("Fp8LtGemm: workspace not 16-byte aligned");
  }
  if (p.m < 1) return absl::InvalidArgumentError(absl::StrCat("Fp8LtGemm: m ", p.m, " < 1"));
  if (p.n <= 0 || p.n % 16 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("Fp8LtGemm: n ", p.n, " is not a positive multiple of 16"));
  }
  if (p.k <= 0 || p.k % kFp8LtScaleBlock != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("Fp8LtGemm: k ", p.k, " is not a positive multiple of 128"));
  }
  if (p.output != Fp8GemmOutput::kF32 && p.output != Fp8GemmOutput::kBf16) {
    return absl::InvalidArgumentError(
        absl::StrCat("Fp8LtGemm: output ", static_cast<int>(p.output), " is not kF32 or kBf16"));
  }
  if (p.y_ld != 0 &&
      (p.y_ld < p.n || p.y_ld * (p.output == Fp8GemmOutput::kBf16 ? 2 : 4) % 16 != 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("Fp8LtGemm: y_ld ", p.y_ld, " is below n ", p.n, " or not 16 bytes of rows"));
  }
  if (p.w_scales_form != Fp8LtWeightScales::kVec128 &&
      p.w_scales_form != Fp8LtWeightScales::kBlk128x128) {
    return absl::InvalidArgumentError(
        absl::StrCat("Fp8LtGemm: w_scales_form ", static_cast<int>(p.w_scales_form), " unknown"));
  }
  // cuBLASLt's dimensions are 64-bit; keep clear of overflow in its byte counts.
  if (p.m > (int64_t{1} << 40) / p.k || p.m > (int64_t{1} << 40) / p.n ||
      p.n > (int64_t{1} << 40) / p.k) {
    return absl::InvalidArgumentError("Fp8LtGemm: m x k, m x n or n x k above 2^40");
  }
  return absl::OkStatus();
}

bool Fp8LtGemm::Takes(int64_t n, int64_t k, Fp8GemmOutput output) {
  return n > 0 && n % 16 == 0 && k > 0 && k % kFp8LtScaleBlock == 0 &&
         (output == Fp8GemmOutput::kF32 || output == Fp8GemmOutput::kBf16);
}

absl::StatusOr<std::unique_ptr<Fp8LtGemm>> Fp8LtGemm::Create() {
  int device = 0, major = 0, minor = 0;
  if (cudaError_t e = cudaGetDevice(&device); e != cudaSuccess) {
    return absl::InternalError(absl::StrCat("Fp8LtGemm: cudaGetDevice: ", cudaGetErrorString(e)));
  }
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
    return absl::InternalError("Fp8LtGemm: compute capability query failed");
  }
  if (major != 9 || minor != 0) {
    return absl::UnimplementedError(absl::StrCat(
        "Fp8LtGemm: cuBLASLt's VEC128 / BLK128x128 FP8 scales need compute capability 9.0, not ",
        major, ".", minor));
  }
  cublasLtHandle_t lt = nullptr;
  WEIR_FP8_LT_CALL("cublasLtCreate", cublasLtCreate(&lt));
  auto gemm = std::unique_ptr<Fp8LtGemm>(new Fp8LtGemm(lt));
  if (cudaError_t e = cudaMalloc(&gemm->workspace_, kWorkspaceBytes); e != cudaSuccess) {
    gemm->workspace_ = nullptr;
    return absl::InternalError(
        absl::StrCat("Fp8LtGemm: workspace cudaMalloc: ", cudaGetErrorString(e)));
  }
  return gemm;
}

Fp8LtGemm::Fp8LtGemm(cublasLtContext* lt) : lt_(lt) {}

Fp8LtGemm::~Fp8LtGemm() {
  if (workspace_ != nullptr) cudaFree(workspace_);
  cublasLtDestroy(lt_);
}

absl::StatusOr<std::unique_ptr<Fp8LtGemm::Plan>> Fp8LtGemm::MakePlan(const Key& key,
                                                                     const Fp8LtGemmParams& p) {
  auto plan = std::make_unique<Plan>();
  cublasLtMatmulDesc_t desc = &plan->desc;
  WEIR_FP8_LT_CALL("MatmulDescInit", cublasLtMatmulDescInit(desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  // TN: A = W [n, k] stored k-major (a column-major k x n, op T), B = X^T
  // (X [m, k] row-major is a column-major k x m), D column-major n x m (= y
  // [m, n] row-major).
  WEIR_FP8_LT_CALL("TRANSA", SetDesc(desc, CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_T));
  WEIR_FP8_LT_CALL("TRANSB", SetDesc(desc, CUBLASLT_MATMUL_DESC_TRANSB, CUBLAS_OP_N));
  WEIR_FP8_LT_CALL("FAST_ACCUM", SetDesc(desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, int8_t{0}));
  const int32_t a_mode = key.w_scales_form == Fp8LtWeightScales::kBlk128x128
                             ? CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F
                             : CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
  const int32_t b_mode = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
  WEIR_FP8_LT_CALL("A_SCALE_MODE", SetDesc(desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, a_mode));
  WEIR_FP8_LT_CALL("B_SCALE_MODE", SetDesc(desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, b_mode));
  if (absl::Status s = SetScalePointers(desc, p); !s.ok()) return s;
  WEIR_FP8_LT_CALL("layout W",
                   cublasLtMatrixLayoutInit(&plan->w_layout, CUDA_R_8F_E4M3, key.k, key.n, key.k));

  // The algorithm, once, at the reference row count.
  cublasLtMatrixLayoutOpaque_t x_layout, y_layout;
  WEIR_FP8_LT_CALL("layout X", cublasLtMatrixLayoutInit(&x_layout, CUDA_R_8F_E4M3, key.k,
                                                        kReferenceRows, key.k));
  WEIR_FP8_LT_CALL("layout y", cublasLtMatrixLayoutInit(&y_layout, OutputType(key.output), key.n,
                                                        kReferenceRows, key.n));
  cublasLtMatmulPreferenceOpaque_t pref_storage;
  cublasLtMatmulPreference_t pref = &pref_storage;
  WEIR_FP8_LT_CALL("PreferenceInit", cublasLtMatmulPreferenceInit(pref));
  WEIR_FP8_LT_CALL("MAX_WORKSPACE_BYTES",
                   SetPref(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, uint64_t{0}));
  // No split-K: each output's dot product in one sequence.
  WEIR_FP8_LT_CALL("REDUCTION_SCHEME_MASK",
                   SetPref(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                           static_cast<uint32_t>(CUBLASLT_REDUCTION_SCHEME_NONE)));
  for (const cublasLtMatmulPreferenceAttributes_t attr :
       {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES}) {
    WEIR_FP8_LT_CALL("MIN_ALIGNMENT", SetPref(pref, attr, kAlignment));
  }
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  WEIR_FP8_LT_CALL("AlgoGetHeuristic",
                   cublasLtMatmulAlgoGetHeuristic(lt_, desc, &plan->w_layout, &x_layout, &y_layout,
                                                  &y_layout, pref, 1, &result, &found));
  const std::string shape =
      absl::StrCat("n ", key.n, " k ", key.k, " output ", static_cast<int>(key.output),
                   " weight scales ", static_cast<int>(key.w_scales_form));
  if (found == 0) {
    return absl::InternalError(
        absl::StrCat("Fp8LtGemm: no cuBLASLt algorithm for ", shape, " at m ", kReferenceRows));
  }
  // The preference already filters these; held here too because batch
  // invariance rests on them.
  int32_t splits = 1;
  uint32_t scheme = CUBLASLT_REDUCTION_SCHEME_NONE;
  size_t written = 0;
  WEIR_FP8_LT_CALL("SPLITK_NUM", cublasLtMatmulAlgoConfigGetAttribute(
                                     &result.algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splits,
                                     sizeof(splits), &written));
  WEIR_FP8_LT_CALL("REDUCTION_SCHEME", cublasLtMatmulAlgoConfigGetAttribute(
                                           &result.algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME,
                                           &scheme, sizeof(scheme), &written));
  if (splits > 1 || scheme != CUBLASLT_REDUCTION_SCHEME_NONE || result.workspaceSize != 0) {
    return absl::InternalError(absl::StrCat("Fp8LtGemm: cuBLASLt's algorithm for ", shape,
                                            " splits K (", splits, ", scheme ", scheme,
                                            ") or needs workspace (", result.workspaceSize, ")"));
  }
  plan->algo = result.algo;
  return plan;
}

absl::Status Fp8LtGemm::Run(const Fp8LtGemmParams& p, cudaStream_t stream) {
  if (absl::Status s = CheckFp8LtGemmParams(p); !s.ok()) return s;
  const Key key{p.n, p.k, p.output, p.w_scales_form};
  auto it = plans_.find(key);
  if (it == plans_.end()) {
    absl::StatusOr<std::unique_ptr<Plan>> plan = MakePlan(key, p);
    if (!plan.ok()) return plan.status();
    it = plans_.emplace(key, *std::move(plan)).first;
  }
  Plan& plan = *it->second;
  cublasLtMatmulDesc_t desc = &plan.desc;
  if (absl::Status s = SetScalePointers(desc, p); !s.ok()) return s;
  const int64_t rows = Fp8LtPaddedRows(p.m);
  cublasLtMatrixLayoutOpaque_t x_layout, y_layout;
  WEIR_FP8_LT_CALL("layout X", cublasLtMatrixLayoutInit(&x_layout, CUDA_R_8F_E4M3, p.k, rows, p.k));
  WEIR_FP8_LT_CALL("layout y", cublasLtMatrixLayoutInit(&y_layout, OutputType(p.output), p.n, rows,
                                                        p.y_ld != 0 ? p.y_ld : p.n));
  cublasLtMatmulHeuristicResult_t check{};
  if (cublasStatus_t s = cublasLtMatmulAlgoCheck(lt_, desc, &plan.w_layout, &x_layout, &y_layout,
                                                 &y_layout, &plan.algo, &check);
      s != CUBLAS_STATUS_SUCCESS) {
    return LtError(absl::StrCat("the algorithm chosen at m ", kReferenceRows, " for n ", p.n, " k ",
                                p.k, " does not take m ", p.m, " (cublasLtMatmulAlgoCheck)"),
                   s);
  }
  // A few bytes of workspace (the block-scaled kernels' own; split-K is
  // refused above) are given; more is an error.
  void* workspace = p.workspace != nullptr ? p.workspace : workspace_;
  const size_t workspace_bytes = p.workspace != nullptr ? p.workspace_bytes : kWorkspaceBytes;
  if (check.workspaceSize > workspace_bytes) {
    return absl::InternalError(absl::StrCat("Fp8LtGemm: the algorithm would need ",
                                            check.workspaceSize, " bytes of workspace at m ", p.m,
                                            " (given ", workspace_bytes, ")"));
  }
  const float alpha = 1.0f, beta = 0.0f;
  WEIR_FP8_LT_CALL("Matmul", cublasLtMatmul(lt_, desc, &alpha, p.w, &plan.w_layout, p.x, &x_layout,
                                            &beta, p.y, &y_layout, p.y, &y_layout, &plan.algo,
                                            workspace, check.workspaceSize, stream));
  return absl::OkStatus();
}

}  // namespace weir::kernels::cuda::dense
