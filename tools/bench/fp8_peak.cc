#include "tools/bench/fp8_peak.h"

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/cublaslt_fp8.h"
#include "kernels/cuda/decode/rows.h"

namespace weir::bench {

absl::StatusOr<double> CublasLtFp8Tflops(int64_t n, int reps) {
  // Frees what it holds on every return path.
  struct Held {
    void *x = nullptr, *w = nullptr, *y = nullptr;
    ~Held() {
      cudaDeviceSynchronize();
      for (void* p : {x, w, y}) cudaFree(p);
    }
  } h;
  auto cuda = [](const char* what, cudaError_t e) -> absl::Status {
    if (e == cudaSuccess) return absl::OkStatus();
    cudaGetLastError();
    return absl::InternalError(absl::StrCat("fp8 peak: ", what, ": ", cudaGetErrorString(e)));
  };
  const size_t elements = static_cast<size_t>(n * n);
  for (auto [p, bytes] :
       {std::pair<void**, size_t>{&h.x, elements}, {&h.w, elements}, {&h.y, elements * 2}}) {
    if (absl::Status s = cuda("malloc", cudaMalloc(p, bytes)); !s.ok()) return s;
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
  std::string error;
  const std::unique_ptr<kernels::cuda::CublasLtFp8> lt = kernels::cuda::CublasLtFp8::Create(&error);
  if (lt == nullptr) return absl::InternalError("fp8 peak: " + error);
  const double ms = lt->Ms(h.w, h.x, h.y, n, n, n, CUDA_R_16BF, nullptr, reps);
  if (ms <= 0) return absl::UnavailableError("fp8 peak: cuBLASLt has no FP8 algorithm here");
  return 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n) /
         (ms / 1e3) / 1e12;
}

}  // namespace weir::bench
