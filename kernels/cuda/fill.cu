#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "kernels/cuda/fill.cuh"
#include "kernels/cuda/fill.h"

namespace weir::kernels::cuda {

absl::Status FillF32(const FillParams& params, cudaStream_t stream) {
  if (params.n < 0) return absl::InvalidArgumentError("FillF32: negative n");
  if (params.n == 0) return absl::OkStatus();
  if (params.out == nullptr) return absl::InvalidArgumentError("FillF32: null out");
  constexpr int kThreads = 256;
  const int64_t blocks = std::min<int64_t>((params.n + kThreads - 1) / kThreads, 65535);
  FillF32Kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(params.out, params.n,
                                                                        params.value);
  if (cudaError_t err = cudaGetLastError(); err != cudaSuccess) {
    return absl::InternalError(std::string("FillF32 launch: ") + cudaGetErrorString(err));
  }
  return absl::OkStatus();
}

}  // namespace weir::kernels::cuda
