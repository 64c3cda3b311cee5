#include <cuda_runtime.h>

#include <string>

#include "kernels/cuda/dense/fake_quant.cuh"
#include "kernels/cuda/dense/fake_quant.h"
#include "kernels/cuda/grid_dependency.cuh"

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

absl::Status Fp8ActivationInput(const float* x, float* scratch, int64_t n, bool fp8,
                                const float** input, cudaStream_t stream) {
  *input = x;
  if (!fp8) return absl::OkStatus();
  if (absl::Status s =
          FakeQuant({.x = x, .out = scratch, .n = n, .format = FakeQuantFormat::kFp8}, stream);
      !s.ok()) {
    return s;
  }
  *input = scratch;
  return absl::OkStatus();
}

// QuantizeNvfp4Kv / QuantizeMxfp4: one thread per element, the kBlock lanes
// of a block consecutive in one warp; the even lane of each pair writes the
// byte (its code low), the block's first lane the scale. The scale and the
// clamped quotient are FakeQuantKernel's, so the codes decode to its values.
namespace {

template <bool kE8m0, int kBlock>
__global__ void QuantizeFp4Kernel(const float* __restrict__ x, uint8_t* __restrict__ codes,
                                  uint8_t* __restrict__ scales, int64_t n) {
  GridDependencyPrologue();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const bool active = i < n;
  const float v = active ? x[i] : 0.0f;
  float amax;
  int nonfinite;
  BlockAmax<kBlock>(v, amax, nonfinite);
  uint32_t scale_code;
  const uint32_t code = Fp4StoredCode<kE8m0>(v, amax, nonfinite, &scale_code);
  const uint32_t high = __shfl_down_sync(0xffffffffu, code, 1);
  if (!active) return;
  if (i % 2 == 0) codes[i / 2] = static_cast<uint8_t>(code | (high << 4));
  if (i % kBlock == 0) scales[i / kBlock] = static_cast<uint8_t>(scale_code);
}

template <bool kE8m0, int kBlock>
absl::Status LaunchQuantizeFp4(const float* x, uint8_t* codes, uint8_t* scales, int64_t n,
                               const char* op, cudaStream_t stream) {
  const bool ok = n == 0 || (n > 0 && n % kBlock == 0 && x != nullptr && codes != nullptr &&
                             scales != nullptr && (n + 255) / 256 <= 0x7FFFFFFF);
  if (!ok) {
    return absl::InvalidArgumentError(std::string(op) + ": needs n a non-negative multiple of " +
                                      std::to_string(kBlock) + " and x, codes, scales when n > 0");
  }
  if (n == 0) return absl::OkStatus();
  constexpr int kThreads = 256;
  QuantizeFp4Kernel<kE8m0, kBlock>
      <<<static_cast<unsigned>((n + kThreads - 1) / kThreads), kThreads, 0, stream>>>(x, codes,
                                                                                      scales, n);
  if (cudaError_t err = cudaGetLastError(); err != cudaSuccess) {
    return absl::InternalError(std::string(op) + " launch: " + cudaGetErrorString(err));
  }
  return absl::OkStatus();
}

}  // namespace

bool SupportsQuantizeNvfp4Kv(const QuantizeNvfp4KvParams& p) {
  return p.n == 0 || (p.n > 0 && p.n % 16 == 0 && p.x != nullptr && p.codes != nullptr &&
                      p.scales != nullptr && (p.n + 255) / 256 <= 0x7FFFFFFF);
}

absl::Status QuantizeNvfp4Kv(const QuantizeNvfp4KvParams& p, cudaStream_t stream) {
  return LaunchQuantizeFp4<false, 16>(p.x, p.codes, p.scales, p.n, "QuantizeNvfp4Kv", stream);
}

absl::Status QuantizeMxfp4(const QuantizeMxfp4Params& p, cudaStream_t stream) {
  return LaunchQuantizeFp4<true, 32>(p.x, p.codes, p.scales, p.n, "QuantizeMxfp4", stream);
}

}  // namespace weir::kernels::cuda::dense
