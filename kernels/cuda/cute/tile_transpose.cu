#include "kernels/cuda/cute/tile_transpose.h"

#include <cuda_runtime.h>

#include <cstdint>
#include <limits>

#include "kernels/cuda/cute/tile_transpose.cuh"
#include "kernels/cuda/launch_status.h"

namespace weir::kernels::cuda {

absl::Status TileTransposeF32(const TileTransposeParams& p, cudaStream_t stream) {
  if (p.rows < 0 || p.cols < 0) {
    return absl::InvalidArgumentError("TileTransposeF32: negative size");
  }
  constexpr int64_t kMaxDim = std::numeric_limits<int32_t>::max();
  if (p.rows > kMaxDim || p.cols > kMaxDim) {
    return absl::InvalidArgumentError("TileTransposeF32: a dimension exceeds 2^31 - 1");
  }
  if (p.rows == 0 || p.cols == 0) return absl::OkStatus();
  if (p.rows * p.cols > kMaxDim) {
    // CuTe's coordinates here are 32-bit.
    return absl::InvalidArgumentError("TileTransposeF32: more than 2^31 - 1 elements");
  }
  if (p.in == nullptr || p.out == nullptr) {
    return absl::InvalidArgumentError("TileTransposeF32: null buffer");
  }
  const int64_t n = p.rows * p.cols;
  const auto in_begin = reinterpret_cast<uintptr_t>(p.in);
  const auto out_begin = reinterpret_cast<uintptr_t>(p.out);
  const auto bytes = static_cast<uintptr_t>(n) * sizeof(float);
  if (in_begin < out_begin + bytes && out_begin < in_begin + bytes) {
    return absl::InvalidArgumentError("TileTransposeF32: in and out overlap");
  }
  const int64_t tiles_c = (p.cols + kTransposeTile - 1) / kTransposeTile;
  const int64_t tiles_r = (p.rows + kTransposeTile - 1) / kTransposeTile;
  if (tiles_r > 65535) {
    return absl::InvalidArgumentError("TileTransposeF32: more than 65535 * 32 rows");
  }
  const dim3 grid(static_cast<unsigned>(tiles_c), static_cast<unsigned>(tiles_r));
  const dim3 block(kTransposeTile, kTransposeRowsPerPass);
  TileTransposeF32Kernel<<<grid, block, 0, stream>>>(p.in, p.out, static_cast<int>(p.rows),
                                                     static_cast<int>(p.cols));
  return LaunchStatus("TileTransposeF32");
}

}  // namespace weir::kernels::cuda
