// kernels/cuda/cute/tile_transpose.cuh — device code of TileTransposeF32.
#ifndef WEIR_KERNELS_CUDA_CUTE_TILE_TRANSPOSE_CUH_
#define WEIR_KERNELS_CUDA_CUTE_TILE_TRANSPOSE_CUH_

#include <cute/tensor.hpp>

#include "kernels/cuda/grid_dependency.cuh"

namespace weir::kernels::cuda {

inline constexpr int kTransposeTile = 32;   // tile edge, elements
inline constexpr int kTransposeRowsPerPass = 8;  // thread block is 32 x 8

// One CTA moves one 32x32 tile: blockIdx.x tiles columns, blockIdx.y rows.
// Threads are laid out 8 x 32 (row-major, so lanes of a warp cover one row
// of the tile): each reads 4 elements of a tile column-block and writes 4 of
// the transposed tile. Edge tiles are predicated element by element.
__global__ void TileTransposeF32Kernel(const float* in, float* out, int rows, int cols) {
  GridDependencyPrologue();
  using namespace cute;
  auto tile = make_shape(Int<kTransposeTile>{}, Int<kTransposeTile>{});
  // +1 column of padding: the column-wise reads of the second half hit 32
  // different banks.
  __shared__ float smem[kTransposeTile * (kTransposeTile + 1)];
  Tensor s = make_tensor(make_smem_ptr(smem),
                         make_layout(tile, make_stride(Int<kTransposeTile + 1>{}, Int<1>{})));

  Tensor g_in = make_tensor(make_gmem_ptr(in), make_shape(rows, cols), make_stride(cols, 1));
  Tensor g_out = make_tensor(make_gmem_ptr(out), make_shape(cols, rows), make_stride(rows, 1));
  // Identity tensors give each element's (row, col) coordinate for predication.
  Tensor c_in = make_identity_tensor(make_shape(rows, cols));
  Tensor c_out = make_identity_tensor(make_shape(cols, rows));

  const int tile_r = blockIdx.y;
  const int tile_c = blockIdx.x;
  Tensor t_in = local_tile(g_in, tile, make_coord(tile_r, tile_c));
  Tensor t_cin = local_tile(c_in, tile, make_coord(tile_r, tile_c));
  Tensor t_out = local_tile(g_out, tile, make_coord(tile_c, tile_r));
  Tensor t_cout = local_tile(c_out, tile, make_coord(tile_c, tile_r));

  auto threads = make_layout(make_shape(Int<kTransposeRowsPerPass>{}, Int<kTransposeTile>{}),
                             LayoutRight{});
  const int tid = threadIdx.y * kTransposeTile + threadIdx.x;
  Tensor my_in = local_partition(t_in, threads, tid);
  Tensor my_cin = local_partition(t_cin, threads, tid);
  Tensor my_s = local_partition(s, threads, tid);
  for (int i = 0; i < size(my_in); ++i) {
    if (elem_less(my_cin(i), shape(c_in))) my_s(i) = my_in(i);
  }
  __syncthreads();

  // The transposed view of the tile in shared memory: element (c, r) of the
  // output tile is s(r, c).
  Tensor s_t = make_tensor(s.data(), make_layout(tile, make_stride(Int<1>{},
                                                                   Int<kTransposeTile + 1>{})));
  Tensor my_out = local_partition(t_out, threads, tid);
  Tensor my_cout = local_partition(t_cout, threads, tid);
  Tensor my_st = local_partition(s_t, threads, tid);
  for (int i = 0; i < size(my_out); ++i) {
    if (elem_less(my_cout(i), shape(c_out))) my_out(i) = my_st(i);
  }
}

}  // namespace weir::kernels::cuda

#endif  // WEIR_KERNELS_CUDA_CUTE_TILE_TRANSPOSE_CUH_
