// kernels/cuda/decode/swiglu.cuh — device code of Swiglu. No host
// dependencies.
#ifndef WEIR_KERNELS_CUDA_DECODE_SWIGLU_CUH_
#define WEIR_KERNELS_CUDA_DECODE_SWIGLU_CUH_

#include <cstdint>

#include "kernels/common/fmath.h"
#include "kernels/cuda/grid_dependency.cuh"
#include "kernels/cuda/rounding.cuh"

namespace weir::kernels::cuda::decode {

// Grid-stride over [rows, inter]; the CPU loop's operations one by one. No
// __restrict__ on gate/up/out: out may alias either.
template <bool kRoundBf16>
__global__ void SwigluKernel(const float* gate, const float* up,
                             const float* __restrict__ route_weight, float* out, int64_t rows,
                             int64_t inter, float limit) {
  GridDependencyPrologue();
  namespace fm = ::weir::kernels::fmath;
  const int64_t n = rows * inter;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < n;
       e += stride) {
    float g = gate[e], u = up[e];
    if constexpr (kRoundBf16) {
      g = RoundToBf16(g);
      u = RoundToBf16(u);
    }
    if (limit > 0.0f) {
      const float lo = -limit;
      u = u < lo ? lo : (limit < u ? limit : u);  // std::clamp(u, -limit, limit)
      g = limit < g ? limit : g;                  // std::min(g, limit)
    }
    float h = __fmul_rn(__fdiv_rn(g, __fadd_rn(1.0f, fm::ExpF(-g))), u);
    if (route_weight != nullptr) h = __fmul_rn(route_weight[e / inter], h);
    if constexpr (kRoundBf16) h = RoundToBf16(h);
    out[e] = h;
  }
}

}  // namespace weir::kernels::cuda::decode

#endif  // WEIR_KERNELS_CUDA_DECODE_SWIGLU_CUH_
