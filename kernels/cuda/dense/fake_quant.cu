#include <cuda_runtime.h>

#include <string>

#include "kernels/cuda/dense/fake_quant.cuh"
#include "kernels/cuda/dense/fake_quant.h"

namespace weir::kernels::cuda::dense {

int FakeQuantBlock(FakeQuantFormat format) {
  switch (format) {
    case FakeQuantFormat::kFp8:
    case FakeQuantFormat::kMxfp4:
      return 32;
    case FakeQuantFormat::kNvfp4Kv:
      return 16;
  }
  return 0;
}

bool SupportsFakeQuant(const FakeQuantParams& p) {
  const int block = FakeQuantBlock(p.format);
  return block > 0 && p.x != nullptr && p.out != nullptr && p.n > 0 && p.n % block == 0;
}

absl::Status FakeQuant(const FakeQuantParams& p, cudaStream_t stream) {
  if (!SupportsFakeQuant(p)) {
    return absl::InvalidArgumentError(
        "FakeQuant: needs device pointers, a known format and n a positive multiple of its "
        "block (32 for FP8 and MXFP4, 16 for NVFP4 KV)");
  }
  constexpr int kThreads = 256;
  const int64_t grid = (p.n + kThreads - 1) / kThreads;
  if (grid > 0x7FFFFFFF) return absl::InvalidArgumentError("FakeQuant: n too large");
  const dim3 g(static_cast<unsigned>(grid));
  switch (p.format) {
    case FakeQuantFormat::kFp8:
      FakeQuantKernel<DeviceFakeQuantFormat::kFp8, 32><<<g, kThreads, 0, stream>>>(p.x, p.out, p.n);
      break;
    case FakeQuantFormat::kMxfp4:
      FakeQuantKernel<DeviceFakeQuantFormat::kMxfp4, 32>
          <<<g, kThreads, 0, stream>>>(p.x, p.out, p.n);
      break;
    case FakeQuantFormat::kNvfp4Kv:
      FakeQuantKernel<DeviceFakeQuantFormat::kNvfp4Kv, 16>
          <<<g, kThreads, 0, stream>>>(p.x, p.out, p.n);
      break;
  }
  if (cudaError_t err = cudaGetLastError(); err != cudaSuccess) {
    return absl::InternalError(std::string("FakeQuant launch: ") + cudaGetErrorString(err));
  }
  return absl::OkStatus();
}

}  // namespace weir::kernels::cuda::dense
