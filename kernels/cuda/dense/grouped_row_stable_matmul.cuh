// kernels/cuda/dense/grouped_row_stable_matmul.cuh — device code of
// RowStableGroupedMatmul. No host dependencies.
#ifndef WEIR_KERNELS_CUDA_DENSE_GROUPED_ROW_STABLE_MATMUL_CUH_
#define WEIR_KERNELS_CUDA_DENSE_GROUPED_ROW_STABLE_MATMUL_CUH_

#include <cstdint>

#include "kernels/cuda/dense/row_stable_matmul.cuh"

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

// Block (x, y = column tile, z = group): the group's rows [begin, end) are a
// [end - begin, in] matrix at x + begin * in and a [end - begin, out] one at
// y + begin * out; the block runs RowStableMatmulTile on them at row tiles
// x, x + gridDim.x, ... while they start inside the group, exactly as
// RowStableMatmulKernel would on those rows alone (gridDim.x only spreads the
// work; it never changes a value). Blocks with no tile in their group return
// before any synchronization; the loop condition is the same for the whole
// block. A null weight pointer fills the block's tiles of the group with NaN.
template <int kThreads, int kRowGroups, int kTm, int kTn, int kBk>
__global__ void __launch_bounds__(kThreads)
    RowStableGroupedMatmulKernel(const float* __restrict__ x,
                                 const int64_t* __restrict__ offsets,
                                 const float* const* __restrict__ w, float* __restrict__ y,
                                 int64_t rows, int64_t out, int64_t in) {
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
  const float* wg = w[g];
  const float* xg = x + begin * in;
  float* yg = y + begin * out;
  if (wg == nullptr) {
    for (; m0 < group_rows; m0 += m_step) {
      for (int e = threadIdx.x; e < kBm * kBn; e += kThreads) {
        const int64_t m = m0 + e / kBn;
        const int64_t n = n0 + e % kBn;
        if (m < group_rows && n < out) yg[m * out + n] = __int_as_float(0x7fffffff);
      }
    }
    return;
  }
  // RowStableMatmulTile synchronizes before it first writes shared memory,
  // so consecutive tiles of one block do not race.
  for (; m0 < group_rows; m0 += m_step) {
    RowStableMatmulTile<kThreads, kRowGroups, kTm, kTn, kBk>(xg, wg, yg, group_rows, out, in,
                                                             m0, n0);
  }
}

}  // namespace weir::kernels::cuda::dense

#endif  // WEIR_KERNELS_CUDA_DENSE_GROUPED_ROW_STABLE_MATMUL_CUH_
