#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/dense/act_quant_fp8.cuh"
#include "kernels/cuda/dense/act_quant_fp8.h"
#include "kernels/cuda/launch_status.h"

namespace weir::kernels::cuda::dense {

absl::Status CheckActQuantFp8Params(const ActQuantFp8Params& p) {
  if (p.x == nullptr || p.codes == nullptr || p.scales == nullptr) {
    return absl::InvalidArgumentError("ActQuantFp8: null pointer");
  }
  if (p.rows <= 0 || p.cols <= 0 || p.cols % 32 != 0) {
    return absl::InvalidArgumentError(
        "ActQuantFp8: rows must be positive and cols a positive multiple of 32");
  }
  if (reinterpret_cast<uintptr_t>(p.x) % 16 != 0 || reinterpret_cast<uintptr_t>(p.codes) % 8 != 0) {
    return absl::InvalidArgumentError("ActQuantFp8: x must be 16-byte and codes 8-byte aligned");
  }
  if (p.dtype != ActDtype::kF32 && p.dtype != ActDtype::kBf16) {
    return absl::InvalidArgumentError("ActQuantFp8: unknown dtype");
  }
  return absl::OkStatus();
}

absl::Status ActQuantFp8(const ActQuantFp8Params& p, cudaStream_t stream) {
  if (absl::Status s = CheckActQuantFp8Params(p); !s.ok()) return s;
  constexpr int kThreads = 256;  // 8 elements each: 64 blocks of 32 per thread block
  const int64_t num_threads = p.rows * p.cols / 8;
  const int64_t grid = (num_threads + kThreads - 1) / kThreads;
  if (grid > int64_t{0x7FFFFFFF}) return absl::InvalidArgumentError("ActQuantFp8: too large");
  if (p.dtype == ActDtype::kBf16) {
    ActQuantFp8Kernel<true><<<static_cast<unsigned>(grid), kThreads, 0, stream>>>(
        p.x, p.codes, p.scales, num_threads, p.row_count, p.cols / 8);
  } else {
    ActQuantFp8Kernel<false><<<static_cast<unsigned>(grid), kThreads, 0, stream>>>(
        p.x, p.codes, p.scales, num_threads, p.row_count, p.cols / 8);
  }
  return LaunchStatus("ActQuantFp8");
}

}  // namespace weir::kernels::cuda::dense
