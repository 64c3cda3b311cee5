// kernels/cuda/decode/dot_rows_element.cuh — DotRows' shape constants and
// its arithmetic for one output element in one thread (no kernels here, so
// any .cu may include it).

#ifndef WEIR_KERNELS_CUDA_DECODE_DOT_ROWS_ELEMENT_CUH_
#define WEIR_KERNELS_CUDA_DECODE_DOT_ROWS_ELEMENT_CUH_

#include <cstdint>

namespace weir::kernels::cuda::decode {

inline constexpr int kDotRowsWarps = 8;
inline constexpr int kDotRowsChunk = 128;  // elements of K per warp step (4 per lane)

// The value DotRowsKernel writes for one output element (x one row, w one
// weight row, k as there), computed by a single thread in the same operations:
// each lane's fma chain over its chunks, the xor butterfly (16, 8, 4, 2, 1) as
// lane 0 ends it (at distance m lane j < m adds lane j + m; IEEE addition is
// commutative, so the operand order of a shuffle does not matter), then the 8
// warp sums in warp order. A warp or lane with no element of k holds +0, as in
// the kernel. kLanes: the lanes that may hold elements (4 x kLanes >= k, or 32),
// so a short k costs no loads or products for the others; their +0 still
// enters the sums. For fused kernels that need a DotRows product inside their
// own loop (MarkovDraft) and must give DotRows' bits.
template <int kLanes>
__device__ inline float DotRowsElement(const float* __restrict__ x, const float* __restrict__ w,
                                       int64_t k) {
  static_assert(kLanes >= 1 && kLanes <= 32);
  float s = 0.0f;
#pragma unroll 1
  for (int warp = 0; warp < kDotRowsWarps; ++warp) {
    float v = 0.0f;
    const int64_t base = static_cast<int64_t>(warp) * kDotRowsChunk;
    if (base < k) {
      float lane[32];
#pragma unroll
      for (int l = 0; l < 32; ++l) lane[l] = 0.0f;
      for (int64_t c0 = base; c0 < k; c0 += kDotRowsWarps * kDotRowsChunk) {
#pragma unroll
        for (int l = 0; l < kLanes; ++l) {
          const int64_t c = c0 + 4 * l;
          if (c < k) {
            float a = lane[l];
            a = fmaf(x[c], w[c], a);
            a = fmaf(x[c + 1], w[c + 1], a);
            a = fmaf(x[c + 2], w[c + 2], a);
            a = fmaf(x[c + 3], w[c + 3], a);
            lane[l] = a;
          }
        }
      }
#pragma unroll
      for (int level = 0; level < 5; ++level) {
        const int m = 16 >> level;
#pragma unroll
        for (int j = 0; j < 16; ++j) {
          if (j < m) lane[j] = __fadd_rn(lane[j], lane[j + m]);
        }
      }
      v = lane[0];
    }
    s = warp == 0 ? v : __fadd_rn(s, v);
  }
  return s;
}

}  // namespace weir::kernels::cuda::decode

#endif  // WEIR_KERNELS_CUDA_DECODE_DOT_ROWS_ELEMENT_CUH_
