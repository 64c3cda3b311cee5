// kernels/common/dot_rows_order.h
//
// DotRows' order (kernels/cuda/decode/dot_rows.h) for one output element in
// one thread, for host and device alike: K cut into 128-element chunks, warp
// w of 8 taking chunks w, w + 8, ...; lane l of it elements 4l .. 4l + 3 of
// each, an fma chain in ascending k from +0; the 32 lane sums meeting in the
// xor butterfly (16, 8, 4, 2, 1), then the 8 warp sums added in warp order.
// DotRowsElement gives the value DotRowsKernel writes, bit for bit: at
// distance m lane j < m adds lane j + m (as lane 0 ends the butterfly; IEEE
// addition is commutative, so a shuffle's operand order does not matter),
// and a warp or lane with no element of k holds +0, whose additions turn a
// -0 into +0 as the kernel's do. Fused kernels that need a DotRows product
// inside their own loop (MarkovDraft) call it; dot_rows_order_test checks it
// on the CPU against a lane-by-lane statement of the kernel.
//
// Header-only (g++ and nvcc). Thread safety: pure functions.

#ifndef WEIR_KERNELS_COMMON_DOT_ROWS_ORDER_H_
#define WEIR_KERNELS_COMMON_DOT_ROWS_ORDER_H_

#include <cmath>
#include <cstdint>

#include "kernels/common/fmath.h"

// nvcc unrolls the lane loops (the lanes then live in registers); g++ has no
// such pragma.
#ifdef __CUDACC__
#define WEIR_DOT_ROWS_HD __host__ __device__
#define WEIR_DOT_ROWS_UNROLL _Pragma("unroll")
#define WEIR_DOT_ROWS_NO_UNROLL _Pragma("unroll 1")
#else
#define WEIR_DOT_ROWS_HD
#define WEIR_DOT_ROWS_UNROLL
#define WEIR_DOT_ROWS_NO_UNROLL
#endif

namespace weir::kernels::dot_rows_order {

inline constexpr int kWarps = 8;
inline constexpr int kChunk = 128;  // elements of K per warp step (4 per lane)

// kLanes: the lanes that may hold elements (4 x kLanes >= k, or 32), so a
// short k costs no loads or products for the others; their +0 still enters
// the sums.
template <int kLanes>
WEIR_DOT_ROWS_HD inline float DotRowsElement(const float* __restrict__ x,
                                             const float* __restrict__ w, int64_t k) {
  static_assert(kLanes >= 1 && kLanes <= 32);
  float s = 0.0f;
  WEIR_DOT_ROWS_NO_UNROLL
  for (int warp = 0; warp < kWarps; ++warp) {
    float v = 0.0f;
    const int64_t base = static_cast<int64_t>(warp) * kChunk;
    if (base < k) {
      float lane[32];
      WEIR_DOT_ROWS_UNROLL
      for (int l = 0; l < 32; ++l) lane[l] = 0.0f;
      for (int64_t c0 = base; c0 < k; c0 += kWarps * kChunk) {
        WEIR_DOT_ROWS_UNROLL
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
      WEIR_DOT_ROWS_UNROLL
      for (int level = 0; level < 5; ++level) {
        const int m = 16 >> level;
        WEIR_DOT_ROWS_UNROLL
        for (int j = 0; j < 16; ++j) {
          if (j < m) lane[j] = fmath::FAdd(lane[j], lane[j + m]);
        }
      }
      v = lane[0];
    }
    s = warp == 0 ? v : fmath::FAdd(s, v);
  }
  return s;
}

}  // namespace weir::kernels::dot_rows_order

#undef WEIR_DOT_ROWS_HD
#undef WEIR_DOT_ROWS_UNROLL
#undef WEIR_DOT_ROWS_NO_UNROLL

#endif  // WEIR_KERNELS_COMMON_DOT_ROWS_ORDER_H_
