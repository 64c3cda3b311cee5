// kernels/cuda/fill.cuh — device code of FillF32. No host dependencies.
#ifndef WEIR_KERNELS_CUDA_FILL_CUH_
#define WEIR_KERNELS_CUDA_FILL_CUH_

#include <cstdint>

#include "kernels/cuda/grid_dependency.cuh"

namespace weir::kernels::cuda {

// Grid-stride loop: any grid size covers any n.
__global__ void FillF32Kernel(float* out, int64_t n, float value) {
  GridDependencyPrologue();
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    out[i] = value;
  }
}

}  // namespace weir::kernels::cuda

#endif  // WEIR_KERNELS_CUDA_FILL_CUH_
