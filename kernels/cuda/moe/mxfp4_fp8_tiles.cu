#include <cuda_runtime.h>

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/launch_status.h"
#include "kernels/cuda/moe/mxfp4_fp8_tiles.cuh"
#include "kernels/cuda/moe/mxfp4_fp8_tiles.h"

namespace weir::kernels::cuda {

absl::Status Mxfp4ToFp8Tiles(const Mxfp4Fp8TilesParams& p, cudaStream_t stream) {
  if (p.w == nullptr || p.w_scales == nullptr || p.codes == nullptr || p.tile_scales == nullptr ||
      p.inexact == nullptr) {
    return absl::InvalidArgumentError("Mxfp4ToFp8Tiles: null pointer");
  }
  if (p.n <= 0 || p.k <= 0 || p.experts <= 0 || p.k % 32 != 0) {
    return absl::InvalidArgumentError(absl::StrCat("Mxfp4ToFp8Tiles: bad shape n ", p.n, " k ", p.k,
                                                   " experts ", p.experts,
                                                   " (k a multiple of 32)"));
  }
  const int64_t codes_stride = p.codes_expert_stride != 0 ? p.codes_expert_stride : p.n * p.k;
  const int64_t tiles_stride =
      p.tile_scales_expert_stride != 0 ? p.tile_scales_expert_stride : (p.n + 31) / 32 * (p.k / 32);
  if (reinterpret_cast<uintptr_t>(p.codes) % 16 != 0 || codes_stride % 16 != 0) {
    return absl::InvalidArgumentError(
        "Mxfp4ToFp8Tiles: codes and their expert stride must be 16-byte aligned");
  }
  if (codes_stride < p.n * p.k || tiles_stride < (p.n + 31) / 32 * (p.k / 32)) {
    return absl::InvalidArgumentError("Mxfp4ToFp8Tiles: an expert stride below its size");
  }
  namespace t = moe::mxfp4_fp8_tiles;
  if (p.tile_rows_per_cta < 1) {
    return absl::InvalidArgumentError("Mxfp4ToFp8Tiles: tile_rows_per_cta below 1");
  }
  const int blocks_per_cta = p.coalesced ? t::kRowBlocks : t::kWarps;
  const int64_t grid_x = (p.k / 32 + blocks_per_cta - 1) / blocks_per_cta,
                grid_y = ((p.n + 31) / 32 + p.tile_rows_per_cta - 1) / p.tile_rows_per_cta;
  if (grid_x > 0x7FFFFFFF || grid_y > 65535 || p.experts > 65535) {
    return absl::InvalidArgumentError("Mxfp4ToFp8Tiles: shape past the launch grid");
  }
  if (cudaError_t e = cudaMemsetAsync(p.inexact, 0, p.experts * sizeof(int32_t), stream);
      e != cudaSuccess) {
    return CudaStatus(e, "Mxfp4ToFp8Tiles: zeroing the counts");
  }
  const dim3 grid(static_cast<unsigned>(grid_x), static_cast<unsigned>(grid_y),
                  static_cast<unsigned>(p.experts));
  const t::KernelArgs args{p.w, p.w_scales, p.codes,      p.tile_scales, p.inexact,
                           p.n, p.k,        codes_stride, tiles_stride,  p.tile_rows_per_cta};
  if (p.coalesced) {
    t::Mxfp4ToFp8TilesRowsKernel<<<grid, t::kRowThreads, 0, stream>>>(args);
  } else if (p.tile_rows_per_cta > 1) {  // a CTA walks its tile rows
    t::Mxfp4ToFp8TilesKernel<true><<<grid, t::kWarps * 32, 0, stream>>>(args);
  } else {
    t::Mxfp4ToFp8TilesKernel<false><<<grid, t::kWarps * 32, 0, stream>>>(args);
  }
  return LaunchStatus("Mxfp4ToFp8Tiles");
}

}  // namespace weir::kernels::cuda
