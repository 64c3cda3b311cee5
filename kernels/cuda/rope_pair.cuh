// kernels/cuda/rope_pair.cuh — ApplyRope's table lookup and pair rotation,
// the one copy of that arithmetic: RopeKernel and the kernels that fuse a
// RoPE into another pass (decode's SwapAxes, dense's split-K reduce) include
// it, so their rotated values are RopeKernel's bits. Device code only.
#ifndef WEIR_KERNELS_CUDA_ROPE_PAIR_CUH_
#define WEIR_KERNELS_CUDA_ROPE_PAIR_CUH_

#include <cstdint>

namespace weir::kernels::cuda {

// The (cos, sin) of `pair` (of `half` = rope_dim / 2) at `position` in a
// by-position table of `rows` rows, NaN outside [0, rows): ApplyRope's
// cos_sin_by_position lookup, shared by the kernels that fuse a RoPE.
__device__ __forceinline__ float2 RopeCosSinAt(const float* __restrict__ cos_sin, int64_t rows,
                                               int64_t position, int half, int pair) {
  if (position >= 0 && position < rows) {
    return {cos_sin[(position * half + pair) * 2], cos_sin[(position * half + pair) * 2 + 1]};
  }
  const float nan = __int_as_float(0x7fffffff);
  return {nan, nan};
}

// The pair (a, b) rotated by (c, s), or by (c, -s) when `inverse`: ApplyRope's
// arithmetic (every product and sum rounded on its own, no FMA).
__device__ __forceinline__ float2 RopeRotatePair(float a, float b, float c, float s,
                                                 bool inverse) {
  if (!inverse) return {__fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s)),
                        __fadd_rn(__fmul_rn(a, s), __fmul_rn(b, c))};
  return {__fadd_rn(__fmul_rn(a, c), __fmul_rn(b, s)), __fsub_rn(__fmul_rn(b, c), __fmul_rn(a, s))};
}

}  // namespace weir::kernels::cuda

#endif  // WEIR_KERNELS_CUDA_ROPE_PAIR_CUH_
