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

// One weight row's 32 codes of a K block (16 packed bytes) through the
// tables of its shift: out[i] holds codes 4 i .. 4 i + 3; returns whether
// every code kept its value.
__device__ __forceinline__ bool ConvertRow(const uint4& packed, const uint32_t (&code)[2],
                                           const uint32_t (&kept)[2], uint32_t (&out)[8]) {
  const uint32_t words[4] = {packed.x, packed.y, packed.z, packed.w};
  const uint32_t code_lo = code[0], code_hi = code[1];
  const uint32_t kept_lo = kept[0], kept_hi = kept[1];
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
  return keep == 0xFFFFFFFFu;
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
    kept = ConvertRow(packed, code_table[shift], kept_table[shift], out);
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

// For every shift s the e4m3 codes of the eight e2m1 magnitudes m x 2^-s
// (byte m of code[s]) and whether each keeps its value (byte m of kept[s]:
// 0xFF or 0), by the per-element arithmetic of the specification; a
// negative code is its magnitude's code with the sign bit (e4m3 and the
// conversions are sign-symmetric, -0 included). kThreads threads share the
// work; the caller synchronizes before reading.
template <int kThreads>
__device__ __forceinline__ void BuildTables(uint32_t (&code_table)[kShifts][2],
                                            uint32_t (&kept_table)[kShifts][2]) {
  for (int i = static_cast<int>(threadIdx.x); i < kShifts * 8; i += kThreads) {
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
}

// Grid (ceil(k / 32 / kWarps), ceil(n / 32 / rows_per_cta), experts): a
// CTA builds its tables once; with kWalk its warps walk rows_per_cta tile
// rows, a tile at a time, else each converts the one tile of blockIdx.y.
template <bool kWalk>
__global__ void __launch_bounds__(kWarps * 32) Mxfp4ToFp8TilesKernel(const KernelArgs args) {
  GridDependencyPrologue();
  __shared__ uint32_t code_table[kShifts][2], kept_table[kShifts][2];
  BuildTables<kWarps * 32>(code_table, kept_table);
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

// The row-major form (Mxfp4Fp8TilesParams::coalesced). A CTA of
// kRowThreads threads owns one tile row (32 weight rows) x kRowBlocks K
// blocks; thread t converts row t / kRowBlocks of K block t % kRowBlocks, so
// a warp's loads are 4 rows x 128 contiguous bytes and its stores 4 rows x
// 256 contiguous bytes (the warp form reads 16 bytes of each of 32 rows
// 2,560 bytes apart at V4.1's k = 5,120). A tile's scale is the largest of
// its 32 rows', reduced through two shuffles and shared memory; a code that
// does not keep its value marks its tile inexact in shared memory. The same
// codes, tile scales and counts as the warp form.
inline constexpr int kRowBlocks = 8;                 // K blocks a CTA
inline constexpr int kRowThreads = 32 * kRowBlocks;  // one a (row, K block)
inline constexpr int kRowWarps = kRowThreads / 32;   // 4 rows a warp
static_assert(kRowThreads / kRowBlocks == 32, "a thread a row of the tile");

// Grid (ceil(k / 32 / kRowBlocks), ceil(n / 32 / rows_per_cta), experts):
// the CTA builds its tables once and walks rows_per_cta tile rows.
__global__ void __launch_bounds__(kRowThreads) Mxfp4ToFp8TilesRowsKernel(const KernelArgs args) {
  GridDependencyPrologue();
  __shared__ uint32_t code_table[kShifts][2], kept_table[kShifts][2];
  // Per tile row parity (two in flight: a tile row's flags are reset while
  // the previous one's may still be read): each warp's largest scale of
  // each K block, then whether a tile lost a code.
  __shared__ __align__(16) uint32_t warp_top[2][kRowBlocks][kRowWarps];
  __shared__ int lost[2][kRowBlocks];
  BuildTables<kRowThreads>(code_table, kept_table);
  const int tid = static_cast<int>(threadIdx.x), lane = tid & 31, warp = tid >> 5;
  const int block_in_cta = tid % kRowBlocks, row_in_tile = tid / kRowBlocks;
  const int64_t blocks = args.k / 32;
  const int64_t kb = static_cast<int64_t>(blockIdx.x) * kRowBlocks + block_in_cta;
  const bool block_ok = kb < blocks;
  const int64_t expert = blockIdx.z;
  const uint8_t* const w = args.w[expert];
  const uint8_t* const s = args.w_scales[expert];
  const int64_t tile_rows = (args.n + 31) / 32;
  const int64_t first = static_cast<int64_t>(blockIdx.y) * args.rows_per_cta;
  const int64_t end = min(tile_rows, first + args.rows_per_cta);
  if (w == nullptr || s == nullptr || reinterpret_cast<uintptr_t>(w) % 16 != 0) {
    // A missing expert: each of its tiles counted, nothing written.
    if (row_in_tile == 0 && block_ok)
      atomicAdd(args.inexact + expert, static_cast<int>(end - first));
    return;  // uniform over the CTA
  }
  __syncthreads();  // the tables
  int parity = 0;
  for (int64_t tile_row = first; tile_row < end; ++tile_row, parity ^= 1) {  // CTA-uniform
    const int64_t row = tile_row * 32 + row_in_tile;
    const bool has = block_ok && row < args.n;
    const uint32_t scale = has ? s[row * blocks + kb] : 0u;
    // Rows 4 warp + 0..3 of this K block sit on lanes block_in_cta + 8 j.
    uint32_t top = scale;
    top = max(top, __shfl_xor_sync(0xffffffffu, top, 8));
    top = max(top, __shfl_xor_sync(0xffffffffu, top, 16));
    if (lane < kRowBlocks) warp_top[parity][lane][warp] = top;
    if (tid < kRowBlocks) lost[parity][tid] = 0;
    __syncthreads();
    {
      const uint4 a = *reinterpret_cast<const uint4*>(warp_top[parity][block_in_cta]);
      const uint4 b = *reinterpret_cast<const uint4*>(warp_top[parity][block_in_cta] + 4);
      top = max(max(max(a.x, a.y), max(a.z, a.w)), max(max(b.x, b.y), max(b.z, b.w)));
    }
    // Binades below the tile's scale, clamped to the tables. A NaN scale
    // (0xFF) is the largest byte, so the tile has one exactly when its top is.
    const int shift = min(static_cast<int>(top - scale), kShifts - 1);
    uint32_t out[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    if (has) {
      const uint4 packed = *reinterpret_cast<const uint4*>(w + row * (args.k / 2) + kb * 16);
      if (!ConvertRow(packed, code_table[shift], kept_table[shift], out)) {
        lost[parity][block_in_cta] = 1;
      }
    }
    __syncthreads();
    const bool exact = lost[parity][block_in_cta] == 0 && top != 0xFFu;
    if (has) {
      uint4* dst = reinterpret_cast<uint4*>(args.codes + expert * args.codes_stride + row * args.k +
                                            kb * 32);
      dst[0] = exact ? make_uint4(out[0], out[1], out[2], out[3]) : make_uint4(0, 0, 0, 0);
      dst[1] = exact ? make_uint4(out[4], out[5], out[6], out[7]) : make_uint4(0, 0, 0, 0);
    }
    if (row_in_tile == 0 && block_ok) {
      args.tile_scales[expert * args.tile_scales_stride + tile_row * blocks + kb] =
          static_cast<uint8_t>(top);
      if (!exact) atomicAdd(args.inexact + expert, 1);
    }
  }
}

}  // namespace weir::kernels::cuda::moe::mxfp4_fp8_tiles

#endif  // WEIR_KERNELS_CUDA_MOE_MXFP4_FP8_TILES_CUH_
