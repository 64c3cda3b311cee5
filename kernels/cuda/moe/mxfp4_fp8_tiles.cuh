// kernels/cuda/moe/mxfp4_fp8_tiles.cuh — device code of Mxfp4ToFp8Tiles
// (mxfp4_fp8_tiles.h). One warp a tile: lane r converts weight row 32 t + r
// of the tile's K block (its 16 packed bytes -> 32 e4m3 codes); the tile's
// scale is the warp's largest row scale; the tile is exact when every lane's
// codes kept their values and no scale is NaN. The per-element arithmetic
// runs once a CTA, into tables of the eight magnitudes' codes at every shift;
// a lane then converts four codes with three byte permutes.
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
  int rows_per_cta;                          // tile rows a CTA walks (>= 1)
};

inline constexpr int kWarps = 4;  // K blocks a CTA (one tile a warp)
// Shifts the CTA tables (0 .. kShifts - 1); a larger one loses every nonzero
// e2m1 value as kShifts - 1 does (6 x 2^-18 is below half e4m3's smallest
// subnormal 2^-9), and an inexact tile's codes are not written.
inline constexpr int kShifts = 32;

// prmt.b32 in its generic form: each selector nibble's low 3 bits pick a byte
// of {b, a}, its msb replicates that byte's sign over the result byte.
__device__ __forceinline__ uint32_t Prmt(uint32_t a, uint32_t b, uint32_t selector) {
  uint32_t d;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(selector));
  return d;
}

// One warp's tile (tile_row, kb) of `expert`: lane r converts weight row 32
// tile_row + r through the CTA's tables.
__device__ __forceinline__ void ConvertTile(const KernelArgs& args,
                                            const uint32_t (&code_table)[kShifts][2],
                                            const uint32_t (&kept_table)[kShifts][2], int64_t kb,
                                            int64_t tile_row, int64_t expert, int lane) {
  const int64_t blocks = args.k / 32;
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
  // Binades below the tile's scale, clamped to the tables.
  const int shift = min(static_cast<int>(top - scale), kShifts - 1);
  uint32_t out[8] = {0, 0, 0, 0, 0, 0, 0, 0};  // 32 codes, 4 a word
  bool kept = true;
  if (has) {
    const uint4 packed = *reinterpret_cast<const uint4*>(w + row * (args.k / 2) + kb * 16);
    const uint32_t words[4] = {packed.x, packed.y, packed.z, packed.w};
    const uint32_t code_lo = code_table[shift][0], code_hi = code_table[shift][1];
    const uint32_t kept_lo = kept_table[shift][0], kept_hi = kept_table[shift][1];
    uint32_t keep = 0xFFFFFFFFu;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      // Codes 4 i .. 4 i + 3: the nibbles of one half word, in order.
      const uint32_t nibbles = (i % 2 == 0 ? words[i / 2] : words[i / 2] >> 16) & 0xFFFFu;
      const uint32_t magnitudes = nibbles & 0x7777u;
      keep &= Prmt(kept_lo, kept_hi, magnitudes);
      // A byte of 0x80 for a positive code, 0xFF (0x80's sign replicated) for
      // a negative one: its bit 0, moved to bit 7, is the code's sign.
      const uint32_t signs = Prmt(0x80808080u, 0x80808080u, nibbles);
      out[i] = Prmt(code_lo, code_hi, magnitudes) | ((signs << 7) & 0x80808080u);
    }
    kept = keep == 0xFFFFFFFFu;
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

// Grid (ceil(k / 32 / kWarps), ceil(n / 32 / rows_per_cta), experts): a
// CTA builds its tables once; with kWalk its warps walk rows_per_cta tile
// rows, a tile at a time, else each converts the one tile of blockIdx.y.
template <bool kWalk>
__global__ void __launch_bounds__(kWarps * 32) Mxfp4ToFp8TilesKernel(const KernelArgs args) {
  GridDependencyPrologue();
  // For every shift s the e4m3 codes of the eight e2m1 magnitudes m x 2^-s
  // (byte m of code[s]) and whether each keeps its value (byte m of kept[s]:
  // 0xFF or 0), by the per-element arithmetic of the specification; a
  // negative code is its magnitude's code with the sign bit (e4m3 and the
  // conversions are sign-symmetric, -0 included).
  __shared__ uint32_t code_table[kShifts][2], kept_table[kShifts][2];
  for (int i = static_cast<int>(threadIdx.x); i < kShifts * 8; i += kWarps * 32) {
    const int sh = i / 8, m = i % 8;
    // e2m1 x 1.0, then the shift: exact in fp32 down to 2^-149; a nonzero
    // code that underflows to 0 lost its value.
    const float v = ldexpf(Mxfp4Value(static_cast<uint32_t>(m), 127u), -sh);
    const uint8_t code = FloatToE4m3(v);
    const bool kept =
        __float_as_uint(E4m3ToFloat(code)) == __float_as_uint(v) && (v != 0.0f || m == 0);
    reinterpret_cast<uint8_t*>(code_table[sh])[m] = code;
    reinterpret_cast<uint8_t*>(kept_table[sh])[m] = kept ? 0xFFu : 0u;
  }
  __syncthreads();
  const int lane = static_cast<int>(threadIdx.x & 31);
  const int64_t kb = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  if (kb >= args.k / 32) return;  // uniform over the warp
  const int64_t expert = blockIdx.z;
  if constexpr (kWalk) {
    const int64_t tile_rows = (args.n + 31) / 32;
    const int64_t first = static_cast<int64_t>(blockIdx.y) * args.rows_per_cta;
    const int64_t end = min(tile_rows, first + args.rows_per_cta);
    for (int64_t tile_row = first; tile_row < end; ++tile_row) {  // uniform over the CTA
      ConvertTile(args, code_table, kept_table, kb, tile_row, expert, lane);
    }
  } else {
    ConvertTile(args, code_table, kept_table, kb, blockIdx.y, expert, lane);
  }
}

}  // namespace weir::kernels::cuda::moe::mxfp4_fp8_tiles

#endif  // WEIR_KERNELS_CUDA_MOE_MXFP4_FP8_TILES_CUH_
