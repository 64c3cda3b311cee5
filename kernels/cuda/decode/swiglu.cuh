// kernels/cuda/decode/swiglu.cuh — device code of Swiglu. No host
// dependencies.
#ifndef WEIR_KERNELS_CUDA_DECODE_SWIGLU_CUH_
#define WEIR_KERNELS_CUDA_DECODE_SWIGLU_CUH_

#include <cstdint>

#include "kernels/common/fmath.h"
#include "kernels/cuda/dense/act_quant_fp8.cuh"
#include "kernels/cuda/grid_dependency.cuh"
#include "kernels/cuda/rounding.cuh"

namespace weir::kernels::cuda::decode {

// Grid-stride over [rows, inter]; the CPU loop's operations one by one. No
// __restrict__ on gate/up/out: out may alias either.
// One element's activation (the CPU loop's operations, see swiglu.h).
template <bool kRoundBf16>
__device__ __forceinline__ float SwigluOf(float g, float u, const float* __restrict__ route_weight,
                                          int64_t row, float limit) {
  namespace fm = ::weir::kernels::fmath;
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
  if (route_weight != nullptr) h = __fmul_rn(route_weight[row], h);
  if constexpr (kRoundBf16) h = RoundToBf16(h);
  return h;
}

template <bool kRoundBf16>
__global__ void SwigluKernel(const float* gate, const float* up,
                             const float* __restrict__ route_weight, float* out, int64_t rows,
                             int64_t inter, float limit, const int64_t* __restrict__ row_count) {
  GridDependencyPrologue();
  const int64_t n = (row_count == nullptr ? rows : min(rows, max(*row_count, int64_t{0}))) * inter;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < n;
       e += stride) {
    out[e] = SwigluOf<kRoundBf16>(gate[e], up[e], route_weight, e / inter, limit);
  }
}

// Thread t: elements [8t, 8t + 8) of [rows, inter] (inter % 32 == 0, so a
// 32-block is 4 consecutive lanes), each as SwigluKernel makes it, into out
// when given, then their FP8 form by ActQuantFp8Kernel's ActQuantEight (the
// same lanes, so the same bits). Every lane of a warp reaches the shuffles.
// kBf16In: gate and up are bf16 bits (uint16_t, 16-byte aligned rows of
// inter % 8 == 0), each widened exactly; with kRoundBf16 that is the value
// the fp32 path's first rounding makes (SwigluParams::gate_bf16).
template <bool kRoundBf16, bool kBf16In = false>
__global__ void SwigluFp8Kernel(const void* gate_in, const void* up_in,
                                const float* __restrict__ route_weight, float* out,
                                uint8_t* __restrict__ codes, uint8_t* __restrict__ scales,
                                int64_t num_threads, int64_t inter, float limit,
                                const int64_t* __restrict__ row_count) {
  GridDependencyPrologue();
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  // With row_count, the threads of rows past it idle (inter % 32 == 0: a
  // 32-block's 4 lanes agree).
  const int64_t limit_threads = row_count == nullptr
                                    ? num_threads
                                    : min(num_threads, max(*row_count, int64_t{0}) * (inter / 8));
  const bool active = t < limit_threads;
  float v[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  if (active) {
    const int64_t e0 = t * 8, row = e0 / inter;
    float g[8], u[8];
    const float* gate = static_cast<const float*>(gate_in);
    const float* up = static_cast<const float*>(up_in);
    // 16-byte loads where gate and up allow them (e0 is a multiple of 8): a
    // warp's eight scalar loads each touched 32 sectors for 1 KB.
    const bool vec =
        ((reinterpret_cast<uintptr_t>(gate) | reinterpret_cast<uintptr_t>(up)) & 15) == 0;
    if constexpr (kBf16In) {
      ::weir::kernels::cuda::dense::LoadEight<true>(gate_in, e0, g);
      ::weir::kernels::cuda::dense::LoadEight<true>(up_in, e0, u);
    } else if (vec) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float4 gv = *reinterpret_cast<const float4*>(gate + e0 + 4 * h);
        const float4 uv = *reinterpret_cast<const float4*>(up + e0 + 4 * h);
        g[4 * h] = gv.x, g[4 * h + 1] = gv.y, g[4 * h + 2] = gv.z, g[4 * h + 3] = gv.w;
        u[4 * h] = uv.x, u[4 * h + 1] = uv.y, u[4 * h + 2] = uv.z, u[4 * h + 3] = uv.w;
      }
    } else {
#pragma unroll
      for (int i = 0; i < 8; ++i) g[i] = gate[e0 + i], u[i] = up[e0 + i];
    }
#pragma unroll
    for (int i = 0; i < 8; ++i) v[i] = SwigluOf<kRoundBf16>(g[i], u[i], route_weight, row, limit);
    if (out != nullptr) {
      if ((reinterpret_cast<uintptr_t>(out) & 15) == 0) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          *reinterpret_cast<float4*>(out + e0 + 4 * h) =
              make_float4(v[4 * h], v[4 * h + 1], v[4 * h + 2], v[4 * h + 3]);
        }
      } else {
#pragma unroll
        for (int i = 0; i < 8; ++i) out[e0 + i] = v[i];
      }
    }
  }
  ::weir::kernels::cuda::dense::ActQuantEight(v, active, codes + t * 8, scales + t / 4);
}

}  // namespace weir::kernels::cuda::decode

#endif  // WEIR_KERNELS_CUDA_DECODE_SWIGLU_CUH_
