#include <cuda_runtime.h>

#include "kernels/cuda/grid_dependency.cuh"
#include "kernels/cuda/launch_status.h"
#include "kernels/cuda/round_pair_probe.h"
#include "kernels/cuda/rounding.cuh"

namespace weir::kernels::cuda {
namespace {

__global__ void RoundPairProbeKernel(const float* __restrict__ in, float* __restrict__ scalar,
                                     float* __restrict__ pair, int64_t pairs) {
  GridDependencyPrologue();
  for (int64_t j = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; j < pairs;
       j += int64_t{gridDim.x} * blockDim.x) {
    float a = in[2 * j], b = in[2 * j + 1];
    scalar[2 * j] = RoundToBf16(a);
    scalar[2 * j + 1] = RoundToBf16(b);
    RoundPairToBf16(a, b);
    pair[2 * j] = a;
    pair[2 * j + 1] = b;
  }
}

}  // namespace

absl::Status RoundPairProbe(const RoundPairProbeParams& p, cudaStream_t stream) {
  if (p.n < 0 || p.n % 2 != 0 ||
      (p.n > 0 && (p.in == nullptr || p.scalar == nullptr || p.pair == nullptr))) {
    return absl::InvalidArgumentError("RoundPairProbe: needs an even n >= 0 and the pointers");
  }
  if (p.n == 0) return absl::OkStatus();
  RoundPairProbeKernel<<<256, 256, 0, stream>>>(p.in, p.scalar, p.pair, p.n / 2);
  return LaunchStatus("RoundPairProbe");
}

}  // namespace weir::kernels::cuda
