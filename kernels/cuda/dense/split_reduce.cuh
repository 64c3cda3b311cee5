// kernels/cuda/dense/split_reduce.cuh — the second kernel of a split-K
// product (Fp8BlockGemm, Bf16Gemm): each output element of a group is its
// splits' fp32 partials added in split order, then rounded as the output asks.
// Device code only, no host dependencies.
#ifndef WEIR_KERNELS_CUDA_DENSE_SPLIT_REDUCE_CUH_
#define WEIR_KERNELS_CUDA_DENSE_SPLIT_REDUCE_CUH_

#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/cuda/dense/act_quant_fp8.cuh"
#include "kernels/cuda/grid_dependency.cuh"
#include "kernels/cuda/rope_pair.cuh"
#include "kernels/cuda/rounding.cuh"

namespace weir::kernels::cuda::dense {

// The sum of one output element's splits: part[0] + part[mn] + ... in split
// order, one rounding each (both reduce kernels' arithmetic).
__device__ __forceinline__ float SumSplits(const float* __restrict__ part, int64_t mn, int splits) {
  float v = part[0];
  for (int s = 1; s < splits; ++s) v = __fadd_rn(v, part[s * mn]);
  return v;
}

// partial: [groups][splits][mn]; y: group g at g * y_stride, its rows of n
// ldy apart, bf16 or fp32 (rounded to bf16 when round_f32). With row_role
// (Bf16GemmParams::row_role; null: every row) only the elements of rows r =
// e / n with row_role[r] == role are written. One thread per element of a
// group, blockIdx.y the group. `static`: each launcher's translation unit has
// its own copy.
static __global__ void SplitReduceKernel(const float* __restrict__ partial, void* y, int64_t mn,
                                         int splits, int64_t y_stride, bool bf16_out,
                                         bool round_f32, int64_t n, int64_t ldy,
                                         const int32_t* __restrict__ row_role, int role) {
  GridDependencyPrologue();
  const int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= mn) return;
  if (row_role != nullptr && row_role[e / n] != role) return;  // a row of the other role
  const int64_t g = blockIdx.y;
  const float v = SumSplits(partial + g * splits * mn + e, mn, splits);
  const int64_t at = g * y_stride + (ldy == n ? e : e / n * ldy + e % n);
  if (bf16_out) {
    static_cast<__nv_bfloat16*>(y)[at] = __float2bfloat16_rn(v);
  } else {
    static_cast<float*>(y)[at] = round_f32 ? RoundToBf16(v) : v;
  }
}

// The FP8 form of y (ActQuantFp8's bits of y as written, rows of n = ldy
// wide) beside it: codes [m, ldy], a UE8M0 scale per 32 [m, ldy / 32]. A 32-
// block of y is 32 consecutive elements of one group's row (n % 32 == 0), so
// one warp (lanes in element order, blockDim a multiple of 32) holds it: the
// amax and the non-finite flag are warp reductions, and every code is
// Fp8ActCode of its value under the block's scale, as ActQuantEight makes it.
static __global__ void SplitReduceFp8Kernel(const float* __restrict__ partial, float* y, int64_t mn,
                                            int splits, int64_t y_stride, bool round_f32, int64_t n,
                                            int64_t ldy, uint8_t* __restrict__ codes,
                                            uint8_t* __restrict__ scales) {
  GridDependencyPrologue();
  const int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= mn) return;  // whole warps (mn % 32 == 0)
  const int64_t g = blockIdx.y;
  float v = SumSplits(partial + g * splits * mn + e, mn, splits);
  if (round_f32) v = RoundToBf16(v);
  const int64_t at = g * y_stride + e / n * ldy + e % n;
  y[at] = v;
  float amax = fabsf(v);
  int nonfinite = isfinite(v) ? 0 : 1;
#pragma unroll
  for (int offset = 1; offset < 32; offset *= 2) {
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, offset));
    nonfinite |= __shfl_xor_sync(0xffffffffu, nonfinite, offset);
  }
  uint32_t scale_code = 0xFFu, code = 0x7Fu;
  if (!nonfinite) {
    scale_code = Fp8ActScaleCode(amax);
    code = Fp8ActCode(v, E8m0ToFloat(scale_code));
  }
  codes[at] = static_cast<uint8_t>(code);
  if ((threadIdx.x & 31) == 0) scales[at / 32] = static_cast<uint8_t>(scale_code);
}

// SplitReduceRopeKernel's RoPE (Fp8BlockGemmParams::Rope on the device).
struct SplitRope {
  const int64_t* positions;
  const float* cos_sin;
  int64_t cos_sin_rows;
  int head_dim, dim;
  bool round_bf16;
};

// SplitReduceKernel of one group into fp32 [m][n], then ApplyRope's rotation
// of each row's heads (forward, by-position table): an element in a head's
// last rope.dim sums its partner's partials too, rounds both as the output
// asks, rotates the pair as RopeKernel does and keeps its own half.
static __global__ void SplitReduceRopeKernel(const float* __restrict__ partial, float* y,
                                             int64_t mn, int64_t n, int splits, bool round_f32,
                                             SplitRope rope) {
  GridDependencyPrologue();
  const int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= mn) return;
  auto sum = [&](int64_t i) {
    const float v = SumSplits(partial + i, mn, splits);
    return round_f32 ? RoundToBf16(v) : v;
  };
  const int64_t col = e % n;
  const int k = static_cast<int>(col % rope.head_dim) - (rope.head_dim - rope.dim);
  if (k < 0) {
    y[e] = sum(e);
    return;
  }
  const int64_t e0 = e - (k & 1);
  const float2 cs =
      RopeCosSinAt(rope.cos_sin, rope.cos_sin_rows, rope.positions[e / n], rope.dim / 2, k >> 1);
  const float2 r = RopeRotatePair(sum(e0), sum(e0 + 1), cs.x, cs.y, /*inverse=*/false);
  const float v = (k & 1) ? r.y : r.x;
  y[e] = rope.round_bf16 ? RoundToBf16(v) : v;
}

// Launches SplitReduceKernel over `groups` groups of `mn` elements (the
// split products' second kernel, as both launchers run it); y's rows of n
// are ldy apart (n = ldy = 0: packed, one row of mn, and row_role null).
static inline void LaunchSplitReduce(const float* partial, void* y, int64_t mn, int64_t groups,
                                     int splits, int64_t y_stride, bool bf16_out, bool round_f32,
                                     int64_t n, int64_t ldy, const int32_t* row_role, int role,
                                     cudaStream_t stream) {
  constexpr int kThreads = 256;
  SplitReduceKernel<<<dim3(static_cast<unsigned>((mn + kThreads - 1) / kThreads),
                           static_cast<unsigned>(groups)),
                      kThreads, 0, stream>>>(partial, y, mn, splits, y_stride, bf16_out, round_f32,
                                             n == 0 ? mn : n, ldy == 0 ? mn : ldy, row_role, role);
}

}  // namespace weir::kernels::cuda::dense

#endif  // WEIR_KERNELS_CUDA_DENSE_SPLIT_REDUCE_CUH_
