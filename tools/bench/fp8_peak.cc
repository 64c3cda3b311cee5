#include "tools/bench/fp8_peak.h"

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/decode/rows.h"

namespace weir::bench {
namespace {

// Frees what it holds on every return path.
struct Held {
  cublasLtHandle_t lt = nullptr;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  void* x = nullptr;
  void* w = nullptr;
  void* y = nullptr;
  void* workspace = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  ~Held() {
    cudaDeviceSynchronize();
    if (pref != nullptr) cublasLtMatmulPreferenceDestroy(pref);
    for (cublasLtMatrixLayout_t l : {a, b, c}) {
      if (l != nullptr) cublasLtMatrixLayoutDestroy(l);
    }
    if (desc != nullptr) cublasLtMatmulDescDestroy(desc);
    if (lt != nullptr) cublasLtDestroy(lt);
    for (void* p : {x, w, y, workspace}) cudaFree(p);
    if (start != nullptr) cudaEventDestroy(start);
    if (stop != nullptr) cudaEventDestroy(stop);
  }
};

}  // namespace

absl::StatusOr<double> CublasLtFp8Tflops(int64_t n, int reps) {
  Held h;
  auto cuda = [](const char* what, cudaError_t e) -> absl::Status {
    if (e == cudaSuccess) return absl::OkStatus();
    cudaGetLastError();
    return absl::InternalError(absl::StrCat("fp8 peak: ", what, ": ", cudaGetErrorString(e)));
  };
  auto lt = [](const char* what, cublasStatus_t s) -> absl::Status {
    if (s == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
    return absl::InternalError(absl::StrCat("fp8 peak: ", what, ": cuBLASLt status ", s));
  };
  const size_t elements = static_cast<size_t>(n * n), workspace_bytes = size_t{64} << 20;
  if (absl::Status s = cuda("malloc", cudaMalloc(&h.x, elements)); !s.ok()) return s;
  if (absl::Status s = cuda("malloc", cudaMalloc(&h.w, elements)); !s.ok()) return s;
  if (absl::Status s = cuda("malloc", cudaMalloc(&h.y, elements * 2)); !s.ok()) return s;
  if (absl::Status s = cuda("malloc", cudaMalloc(&h.workspace, workspace_bytes)); !s.ok()) {
    return s;
  }
  // Random bytes with the top exponent bit clear: finite e4m3 values of
  // moderate size (never NaN: 0x7F / 0xFF need it set).
  for (void* p : {h.x, h.w}) {
    if (absl::Status s = kernels::cuda::decode::RandomBytes({.x = static_cast<uint8_t*>(p),
                                                             .n = static_cast<int64_t>(elements),
                                                             .seed = reinterpret_cast<uintptr_t>(p),
                                                             .mask = 0xBF},
                                                            nullptr);
        !s.ok()) {
      return s;
    }
  }
  if (absl::Status s = lt("create", cublasLtCreate(&h.lt)); !s.ok()) return s;
  if (absl::Status s =
          lt("desc", cublasLtMatmulDescCreate(&h.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
      !s.ok()) {
    return s;
  }
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  cublasLtMatmulDescSetAttribute(h.desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta));
  cublasLtMatmulDescSetAttribute(h.desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb));
  cublasLtMatrixLayoutCreate(&h.a, CUDA_R_8F_E4M3, n, n, n);
  cublasLtMatrixLayoutCreate(&h.b, CUDA_R_8F_E4M3, n, n, n);
  cublasLtMatrixLayoutCreate(&h.c, CUDA_R_16BF, n, n, n);
  cublasLtMatmulPreferenceCreate(&h.pref);
  const uint64_t ws = workspace_bytes;
  cublasLtMatmulPreferenceSetAttribute(h.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                       sizeof(ws));
  cublasLtMatmulHeuristicResult_t result;
  int found = 0;
  if (cublasLtMatmulAlgoGetHeuristic(h.lt, h.desc, h.a, h.b, h.c, h.c, h.pref, 1, &result,
                                     &found) != CUBLAS_STATUS_SUCCESS ||
      found == 0) {
    return absl::UnavailableError("fp8 peak: cuBLASLt has no FP8 algorithm here");
  }
  const float alpha = 1.0f, beta = 0.0f;
  auto launch = [&]() {
    return cublasLtMatmul(h.lt, h.desc, &alpha, h.w, h.a, h.x, h.b, &beta, h.y, h.c, h.y, h.c,
                          &result.algo, h.workspace, workspace_bytes, nullptr);
  };
  for (int i = 0; i < 3; ++i) {
    if (absl::Status s = lt("matmul", launch()); !s.ok()) return s;
  }
  if (absl::Status s = cuda("event", cudaEventCreate(&h.start)); !s.ok()) return s;
  if (absl::Status s = cuda("event", cudaEventCreate(&h.stop)); !s.ok()) return s;
  std::vector<float> ms(std::max(reps, 1));
  for (float& t : ms) {
    cudaEventRecord(h.start, nullptr);
    if (absl::Status s = lt("matmul", launch()); !s.ok()) return s;
    cudaEventRecord(h.stop, nullptr);
    if (absl::Status s = cuda("sync", cudaEventSynchronize(h.stop)); !s.ok()) return s;
    cudaEventElapsedTime(&t, h.start, h.stop);
  }
  std::sort(ms.begin(), ms.end());
  const double seconds = ms[ms.size() / 2] / 1e3;
  return 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n) / seconds /
         1e12;
}

}  // namespace weir::bench
