// kernels/cuda/cute/tile_transpose.h
//
// TileTransposeF32: out[cols, rows] = in[rows, cols]^T, both row-major fp32,
// written with CuTe layouts and tensors (CUTLASS 4.2 from the pinned Python
// environment, @cutlass). A 32x32 tile per CTA goes through shared memory so
// that both the read of `in` and the write of `out` are coalesced.
//
// It is the smallest kernel of the project built on CuTe: the proof that
// weir_cuda_library(cutlass = True) compiles CuTe code for sm_90a on machines
// without a GPU, and the place to read how the project uses CuTe (layouts,
// local_tile, partitioning by thread layout) before the tensor-core kernels.
// Exact (a copy), so its test compares bit for bit.
//
// Thread safety: stateless; safe from any thread. Capturable in CUDA graphs.

#ifndef WEIR_KERNELS_CUDA_CUTE_TILE_TRANSPOSE_H_
#define WEIR_KERNELS_CUDA_CUTE_TILE_TRANSPOSE_H_

#include <cstdint>

#include "absl/status/status.h"

typedef struct CUstream_st* cudaStream_t;

namespace weir::kernels::cuda {

struct TileTransposeParams {
  const float* in = nullptr;  // device, [rows, cols] row-major
  float* out = nullptr;       // device, [cols, rows] row-major; must not alias `in`
  int64_t rows = 0;
  int64_t cols = 0;
};

// Enqueues the transpose on `stream`. INVALID_ARGUMENT for negative sizes,
// null pointers with a non-empty matrix, aliasing buffers, or more than
// 2^31 - 1 elements; INTERNAL with the CUDA error if the launch fails.
absl::Status TileTransposeF32(const TileTransposeParams& params, cudaStream_t stream);

}  // namespace weir::kernels::cuda

#endif  // WEIR_KERNELS_CUDA_CUTE_TILE_TRANSPOSE_H_
