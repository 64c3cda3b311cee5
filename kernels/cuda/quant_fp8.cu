#include <cuda_runtime.h>

#include <string>

#include "kernels/cuda/quant_fp8.cuh"
#include "kernels/cuda/quant_fp8.h"

namespace weir::kernels::cuda {

bool SupportsQuantizeFp8(const QuantizeFp8Params& p) {
  return p.block == 32 && p.n > 0 && p.n % 32 == 0 && p.x != nullptr && p.codes != nullptr &&
         p.scales != nullptr;
}

absl::Status QuantizeFp8(const QuantizeFp8Params& p, cudaStream_t stream) {
  if (!SupportsQuantizeFp8(p)) {
    return absl::InvalidArgumentError(
        "QuantizeFp8: needs block 32, n a positive multiple of 32 and device pointers");
  }
  constexpr int kThreads = 256;  // 8 blocks of 32 per thread block
  const int64_t num_blocks = p.n / 32;
  const int64_t grid = (num_blocks * 32 + kThreads - 1) / kThreads;
  QuantizeFp8Kernel<<<static_cast<unsigned>(grid), kThreads, 0, stream>>>(p.x, p.codes, p.scales,
                                                                          num_blocks);
  if (cudaError_t err = cudaGetLastError(); err != cudaSuccess) {
    return absl::InternalError(std::string("QuantizeFp8 launch: ") + cudaGetErrorString(err));
  }
  return absl::OkStatus();
}

}  // namespace weir::kernels::cuda
