// kernels/cuda/dense/grouped_row_stable_matmul.cuh — device code of
// RowStableGroupedMatmul. No host dependencies.
#ifndef WEIR_KERNELS_CUDA_DENSE_GROUPED_ROW_STABLE_MATMUL_CUH_
#define WEIR_KERNELS_CUDA_DENSE_GROUPED_ROW_STABLE_MATMUL_CUH_

#include <cstdint>

#include "kernels/cuda/dense/row_stable_matmul.cuh"
#include "kernels/cuda/grid_dependency.cuh"
#include "kernels/cuda/rounding.cuh"

namespace weir::kernels::cuda::dense {

// Group g's row range [*begin, *end), each offset clamped into [0, rows] and
// an end below the begin read as an empty group.
__device__ __forceinline__ void GroupRowRange(const int64_t* __restrict__ offsets, int g,
                                              int64_t rows, int64_t* begin, int64_t* end) {
  int64_t b = offsets[g];
  int64_t e = offsets[g + 1];
  b = b < 0 ? 0 : (b > rows ? rows : b);
  e = e < b ? b : (e > rows ? rows : e);
  *begin = b;
  *end = e;
}

// Weight source of RowStableMatmulTileOf: MXFP4 W [out, in] stored as e2m1
// codes [out, in / 2] (element 2k in the low nibble) and E8M0 scales
// [out, in / 32]. Fetch reads 8 elements at once (one 32-bit word of codes,
// element j in bits 4j..4j+3, and their shared scale); Decode dequantizes
// element j when the slice is staged. REQUIRES: in % 32 == 0 and the codes 4-byte
// aligned.
struct Mxfp4WeightRows {
  static constexpr int kVector = 8;
  struct Raw {
    uint32_t codes;
    uint32_t scale;
  };
  const uint8_t* __restrict__ codes;
  const uint8_t* __restrict__ scales;
  int64_t in;
  __device__ __forceinline__ Raw Fetch(int64_t n, int64_t k) const {
    const int64_t at = n * in + k;  // a multiple of 8: the word is aligned
    return {*reinterpret_cast<const uint32_t*>(codes + (at >> 1)), scales[at >> 5]};
  }
  // Codes 0 under scale 2^0: +0.
  __device__ __forceinline__ static Raw Zero() { return {0u, 127u}; }
  __device__ __forceinline__ static float Decode(Raw r, int j) {
    return Mxfp4Value((r.codes >> (4 * j)) & 0xFu, r.scale);
  }
};

// Per-group weights of the grouped kernel: GroupRows(g, in, &rows) sets group g's
// weight source and returns false when the group has no weights (a null
// pointer).
struct Fp32GroupWeights {
  using Rows = Fp32WeightRows;
  const float* const* w;  // [num_groups] of [out, in]
  __device__ __forceinline__ bool GroupRows(int g, int64_t in, Rows* rows) const {
    *rows = Rows{w[g], in};
    return rows->w != nullptr;
  }
};

struct Mxfp4GroupWeights {
  using Rows = Mxfp4WeightRows;
  const uint8_t* const* codes;   // [num_groups] of [out, in / 2]
  const uint8_t* const* scales;  // [num_groups] of [out, in / 32]
  __device__ __forceinline__ bool GroupRows(int g, int64_t in, Rows* rows) const {
    *rows = Rows{codes[g], scales[g], in};
    return rows->codes != nullptr && rows->scales != nullptr;
  }
};

// Block (x, y = column tile, z = group): the group's rows [begin, end) are a
// [end - begin, in] matrix at x + begin * in and a [end - begin, out] one at
// y + begin * out; the block runs RowStableMatmulTileOf on them at row tiles
// x, x + gridDim.x, ... while they start inside the group, exactly as
// RowStableMatmulKernel would on those rows alone (gridDim.x only spreads the
// work; it never changes a value). Blocks with no tile in their group return
// before any synchronization; the loop condition is the same for the whole
// block. A group without weights (GroupRows false) gets NaN in the block's
// tiles. GroupWeights is Fp32GroupWeights or Mxfp4GroupWeights.
template <int kThreads, int kRowGroups, int kTm, int kTn, int kBk, typename GroupWeights>
__global__ void __launch_bounds__(kThreads)
    RowStableGroupedMatmulKernel(const float* __restrict__ x,
                                 const int64_t* __restrict__ offsets, GroupWeights weights,
                                 float* __restrict__ y, int64_t rows, int64_t out, int64_t in) {
  GridDependencyPrologue();
  constexpr int kBm = kRowGroups * kTm;
  constexpr int kBn = kThreads / 4 / kRowGroups * kTn;
  const int g = static_cast<int>(blockIdx.z);
  int64_t begin, end;
  GroupRowRange(offsets, g, rows, &begin, &end);
  const int64_t group_rows = end - begin;
  const int64_t n0 = static_cast<int64_t>(blockIdx.y) * kBn;
  const int64_t m_step = static_cast<int64_t>(gridDim.x) * kBm;
  int64_t m0 = static_cast<int64_t>(blockIdx.x) * kBm;
  if (m0 >= group_rows) return;
  typename GroupWeights::Rows wg;
  const bool has_weights = weights.GroupRows(g, in, &wg);
  const float* xg = x + begin * in;
  float* yg = y + begin * out;
  if (!has_weights) {
    for (; m0 < group_rows; m0 += m_step) {
      for (int e = threadIdx.x; e < kBm * kBn; e += kThreads) {
        const int64_t m = m0 + e / kBn;
        const int64_t n = n0 + e % kBn;
        if (m < group_rows && n < out) yg[m * out + n] = __int_as_float(0x7fffffff);
      }
    }
    return;
  }
  // RowStableMatmulTileOf synchronizes before it first writes shared memory,
  // so consecutive tiles of one block do not race.
  for (; m0 < group_rows; m0 += m_step) {
    RowStableMatmulTileOf<kThreads, kRowGroups, kTm, kTn, kBk>(xg, wg, yg, group_rows, out, in,
                                                               m0, n0);
  }
}

}  // namespace weir::kernels::cuda::dense

#endif  // WEIR_KERNELS_CUDA_DENSE_GROUPED_ROW_STABLE_MATMUL_CUH_
