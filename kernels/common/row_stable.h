// kernels/common/row_stable.h
//
// The row-stable order: the one sequence of operations every batch-invariant
// fp32 product of the project uses for an output element
// y = sum over k in [0, n) of x[k] * w[k]. Specified here once; the CPU's
// worker/model RowStableGemm and the GPU's dense::RowStableMatmul,
// dense::RowStableGroupedMatmul and decode::RowStableDot move data in their
// own ways but compute every element with exactly these operations, so they
// agree bit for bit whatever the row count (the batch-invariance contract of
// worker/model/ops.h).
//
// * Four lanes (kRowStableLanes): lane l = RowStableLane(k) = k mod 4 sums the
//   terms k = l, l + 4, l + 8, ... in ascending k, starting from +0, one
//   RowStableStep each: acc + x[k] * w[k], the product rounded to fp32 before
//   the addition (never an FMA).
// * The lanes meet as (l0 + l1) + (l2 + l3) (RowStableCombine).
// * Padding: a lane sum that starts at +0 is never -0, so adding the product
//   of a zero-padded term (+0) leaves it unchanged; an implementation may pad
//   k with zeros on either side without changing the bits.
//
// Unlike fmath.h's LaneSum (32 lanes, a warp's butterfly), this order keeps
// the dependent additions per lane short (n / 4) and lets one output live in
// a quad of threads (RowStableQuadCombine) or in one thread's four registers.
//
// Header-only, compiled by g++ and nvcc alike; host code that uses it builds
// with -ffp-contract=off (as kernels/cpu), device code gets the rounding
// intrinsics through fmath.h.
//
// Thread safety: pure functions.

#ifndef WEIR_KERNELS_COMMON_ROW_STABLE_H_
#define WEIR_KERNELS_COMMON_ROW_STABLE_H_

#include <cstdint>

#include "kernels/common/fmath.h"

#ifdef __CUDACC__
#define WEIR_ROW_STABLE_HD __host__ __device__
#else
#define WEIR_ROW_STABLE_HD
#endif

namespace weir::kernels {

inline constexpr int kRowStableLanes = 4;

// The lane that sums term k.
WEIR_ROW_STABLE_HD constexpr int RowStableLane(int64_t k) {
  return static_cast<int>(k % kRowStableLanes);
}

// One term added to its lane's sum: acc + x * w, the product rounded first.
WEIR_ROW_STABLE_HD inline float RowStableStep(float acc, float x, float w) {
  return fmath::FAdd(acc, fmath::FMul(x, w));
}

// The four lane sums combined: (l0 + l1) + (l2 + l3).
WEIR_ROW_STABLE_HD inline float RowStableCombine(float l0, float l1, float l2, float l3) {
  return fmath::FAdd(fmath::FAdd(l0, l1), fmath::FAdd(l2, l3));
}

// The order itself, one element at a time: the reference the fast forms are
// tested against.
WEIR_ROW_STABLE_HD inline float RowStableDotReference(const float* x, const float* w, int64_t n) {
  float lane[kRowStableLanes] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int64_t k = 0; k < n; ++k) {
    const int l = RowStableLane(k);
    lane[l] = RowStableStep(lane[l], x[k], w[k]);
  }
  return RowStableCombine(lane[0], lane[1], lane[2], lane[3]);
}

#ifdef __CUDACC__
// RowStableCombine over a quad: the calling thread holds lane
// threadIdx.x % 4 of an output whose four lanes sit in the four adjacent
// threads 4q .. 4q + 3 of its warp. Every thread of the warp must call it
// (shuffles); every thread of the quad gets the combined sum (addition is
// commutative, so lanes 1..3 compute the same value as lane 0).
__device__ inline float RowStableQuadCombine(float lane_sum) {
  const float pair = fmath::FAdd(lane_sum, __shfl_xor_sync(0xffffffffu, lane_sum, 1));
  return fmath::FAdd(pair, __shfl_xor_sync(0xffffffffu, pair, 2));
}
#endif

}  // namespace weir::kernels

#undef WEIR_ROW_STABLE_HD

#endif  // WEIR_KERNELS_COMMON_ROW_STABLE_H_
