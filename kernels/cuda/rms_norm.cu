#include <cuda_runtime.h>

#include <string>

#include "kernels/cuda/rms_norm.cuh"
#include "kernels/cuda/rms_norm.h"

namespace weir::kernels::cuda {

bool SupportsRmsNorm(const RmsNormParams& p) {
  return p.rows > 0 && p.dim > 0 && p.dim % 4 == 0 && p.x != nullptr && p.out != nullptr &&
         p.eps >= 0.0f && p.rows <= 0x7fffffff && NormFp8OutputOk(p.out, p.codes, p.scales, p.dim);
}

absl::Status RmsNorm(const RmsNormParams& p, cudaStream_t stream) {
  if (!SupportsRmsNorm(p)) {
    return absl::InvalidArgumentError(
        "RmsNorm: needs rows > 0, dim > 0 and a multiple of 4, x and out, eps >= 0 (with "
        "codes: scales, dim a multiple of 32, codes 8-byte and out 32-byte aligned)");
  }
  constexpr int kThreads = 256;
  // Rows up to kStagedRowMaxBytes (the default shared memory) are staged.
  const int64_t row_bytes = p.dim * static_cast<int64_t>(sizeof(float));
  if (row_bytes <= kStagedRowMaxBytes) {
    RmsNormKernel<kThreads, true>
        <<<static_cast<unsigned>(p.rows), kThreads, static_cast<size_t>(row_bytes), stream>>>(
            p.x, p.weight, p.out, p.dim, p.eps, p.round_bf16, p.codes, p.scales);
  } else {
    RmsNormKernel<kThreads, false><<<static_cast<unsigned>(p.rows), kThreads, 0, stream>>>(
        p.x, p.weight, p.out, p.dim, p.eps, p.round_bf16, p.codes, p.scales);
  }
  if (cudaError_t err = cudaGetLastError(); err != cudaSuccess) {
    return absl::InternalError(std::string("RmsNorm launch: ") + cudaGetErrorString(err));
  }
  return absl::OkStatus();
}

}  // namespace weir::kernels::cuda
