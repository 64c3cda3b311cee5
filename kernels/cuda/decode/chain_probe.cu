#include <cuda_runtime.h>

#include <string>

#include "kernels/cuda/decode/chain_probe.h"
#include "kernels/cuda/grid_dependency.cuh"

namespace weir::kernels::cuda::decode {
namespace {

__device__ long long g_cycles;
__device__ double g_sink;

template <typename T>
__global__ void ChainProbeKernel(int n, T b) {
  GridDependencyPrologue();
  T a = b;
  const long long c0 = clock64();
  for (int i = 0; i < n; ++i) {
    if constexpr (sizeof(T) == 4) {
      a = __fadd_rn(a, b);
    } else {
      a = __dadd_rn(a, b);
    }
  }
  const long long c1 = clock64();
  g_sink = static_cast<double>(a);
  g_cycles = c1 - c0;
}

absl::Status Check(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(std::string(what) + ": " + cudaGetErrorString(err));
}

}  // namespace

absl::Status EnqueueChainProbe(bool fp64, int n, cudaStream_t stream) {
  if (n <= 0) return absl::InvalidArgumentError("EnqueueChainProbe: n must be positive");
  if (fp64) {
    ChainProbeKernel<double><<<1, 1, 0, stream>>>(n, 1e-7);
  } else {
    ChainProbeKernel<float><<<1, 1, 0, stream>>>(n, 1e-7f);
  }
  return Check(cudaGetLastError(), "ChainProbe launch");
}

absl::Status ChainProbeCycles(long long* cycles) {
  if (absl::Status s = Check(cudaDeviceSynchronize(), "ChainProbe"); !s.ok()) return s;
  return Check(cudaMemcpyFromSymbol(cycles, g_cycles, sizeof(long long)), "ChainProbe copy");
}

}  // namespace weir::kernels::cuda::decode
