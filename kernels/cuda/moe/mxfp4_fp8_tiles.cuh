// kernels/cuda/moe/mxfp4_fp8_tiles.cuh — device code of Mxfp4ToFp8Tiles
// (mxfp4_fp8_tiles.h). One warp a tile: lane r converts weight row 32 t + r
// of the tile's K block (its 16 packed bytes -> 32 e4m3 codes); the tile's
// scale is the warp's largest row scale; the tile is exact when every lane's
// codes kept their values and no scale is NaN.
#ifndef WEIR_KERNELS_CUDA_MOE_MXFP4_FP8_TILES_CUH_
#define WEIR_KERNELS_CUDA_MOE_MXFP4_FP8_TILES_CUH_

#include <cstdint>

#include "kernels/cuda/grid_dependency.cuh"
#include "kernels/cuda/rounding.cuh"

namespace weir::kernels::cuda::moe::mxfp4_fp8_tiles {

struct KernelArgs {
  const uint8_t* const* w;
  const uint8_t* const* w_scales;
  uint8_t* codes;
  uint8_t* tile_scales;
  int32_t* inexact;
  int64_t n, k;
  int64_t codes_stride, tile_scales_stride;  // between experts, resolved
};

inline constexpr int kWarps = 4;  // K blocks a CTA (one tile a warp)

// Grid (ceil(k / 32 / kWarps), ceil(n / 32), experts).
__global__ void __launch_bounds__(kWarps * 32) Mxfp4ToFp8TilesKernel(const KernelArgs args) {
  GridDependencyPrologue();
  const int lane = static_cast<int>(threadIdx.x & 31);
  const int64_t blocks = args.k / 32;
  const int64_t kb = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  if (kb >= blocks) return;  // uniform over the warp
  const int64_t tile_row = blockIdx.y, expert = blockIdx.z;
  const uint8_t* const w = args.w[expert];
  const uint8_t* const s = args.w_scales[expert];
  if (w == nullptr || s == nullptr || reinterpret_cast<uintptr_t>(w) % 16 != 0) {
    if (lane == 0) atomicAdd(args.inexact + expert, 1);
    return;
  }
  const int64_t row = tile_row * 32 + lane;
  const bool has = row < args.n;
  const uint32_t scale = has ? s[row * blocks + kb] : 0u;
  const uint32_t top = __reduce_max_sync(0xffffffffu, scale);
  const bool nan_scale = __any_sync(0xffffffffu, has && scale == 0xFFu);
  const int shift = static_cast<int>(top - scale);  // binades below the tile's scale
  uint32_t out[8] = {0, 0, 0, 0, 0, 0, 0, 0};       // 32 codes, 4 a word
  bool kept = true;
  if (has) {
    const uint4 packed = *reinterpret_cast<const uint4*>(w + row * (args.k / 2) + kb * 16);
    const uint32_t words[4] = {packed.x, packed.y, packed.z, packed.w};
#pragma unroll
    for (int i = 0; i < 32; ++i) {
      const uint32_t e2m1 = (words[i / 8] >> (4 * (i % 8))) & 0xFu;
      // e2m1 x 1.0, then the shift: exact in fp32 down to 2^-149; a nonzero
      // code that underflows to 0 lost its value.
      const float v = ldexpf(Mxfp4Value(e2m1, 127u), -shift);
      const uint8_t code = FloatToE4m3(v);
      kept = kept && __float_as_uint(E4m3ToFloat(code)) == __float_as_uint(v) &&
             (v != 0.0f || (e2m1 & 7u) == 0u);
      out[i / 4] |= static_cast<uint32_t>(code) << (8 * (i % 4));
    }
  }
  const bool exact = __all_sync(0xffffffffu, kept) && !nan_scale;
  if (has) {
    uint4* dst =
        reinterpret_cast<uint4*>(args.codes + expert * args.codes_stride + row * args.k + kb * 32);
    dst[0] = exact ? make_uint4(out[0], out[1], out[2], out[3]) : make_uint4(0, 0, 0, 0);
    dst[1] = exact ? make_uint4(out[4], out[5], out[6], out[7]) : make_uint4(0, 0, 0, 0);
  }
  if (lane == 0) {
    args.tile_scales[expert * args.tile_scales_stride + tile_row * blocks + kb] =
        static_cast<uint8_t>(top);
    if (!exact) atomicAdd(args.inexact + expert, 1);
  }
}

}  // namespace weir::kernels::cuda::moe::mxfp4_fp8_tiles

#endif  // WEIR_KERNELS_CUDA_MOE_MXFP4_FP8_TILES_CUH_
