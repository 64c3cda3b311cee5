// kernels/cuda/moe/mxfp4_bf16_gemm_sm90.cuh — Mxfp4Bf16GroupedGemm's kernel
// (mxfp4_bf16_gemm_sm90.h): Bf16Gemm's warp-specialized prefill tile
// (dense/bf16_gemm_ws_sm90.cuh, one CTA a 128 x 128 tile of Y^T, the same
// wgmma m64n128k16 bf16 over stages of 64 of K) with the W tile widened in
// shared memory from the expert's MXFP4 codes instead of loaded in bf16, and
// the rows grouped by expert (the compact grid of Fp8BlockGemm's grouped
// prefill tile). Device code only; included by mxfp4_bf16_gemm_sm90.cu.
//
//  * warps 0 - 3 or 0 - 7 (the wideners, 128 or 256 threads: the kernel's
//    template argument, Mxfp4Bf16GroupedGemmParams::widener_warps): a stage of
//    W is 128 rows x 2 K blocks of 32, 256 units of 16 code bytes and one
//    scale byte; of 128 wideners thread t owns units t and t + 128 of every
//    stage, of 256 unit t alone, and copies them (cp.async, 16
//    bytes of codes and the 4-byte scale word holding its byte) kDepth - 1
//    stages ahead into its own raw slots, waits for the stage's ring slot to
//    be free (`empty`), widens its units into the slot's W tile at the
//    swizzled places TMA would have put bf16 rows (Mxfp4ToBf16EightBf16Mul
//    for a quantizer's scales, Mxfp4ToBf16Eight for 0, 1 and 0xFF), fences
//    them for the async proxy and arrives on `full`. Thread 0 also issues the
//    stage's X box (128 rows x 128 bytes, 128-byte swizzle) on `full` once
//    the slot is free, so `full` counts 1 + the wideners' arrivals and X's
//    bytes. Counted from the SASS: about 200 instructions a thread and stage
//    with four warps against the stage's 512 cycles of bf16 wgmma, one warp
//    an SM sub-partition with little to hide its latencies behind; measured
//    (H100, 2026-12-07) the products ran at about half the dense bf16 tile's
//    rate per used row, so eight warps halve each one's share and pair them.
//  * the last two warpgroups (the consumers): Bf16GemmWsKernel's loop, W rows 64 c
//    .. 64 c + 63 of the tile and all 128 X rows, four wgmma a stage into the
//    same fp32 accumulators; a slot is freed once the next stage's group is
//    issued and the previous one has retired.
// The sums are the bf16 tile's, in its order, so a row's bits are those of
// dense::Bf16Gemm's kN128M128Ws over the widened weight.
#ifndef WEIR_KERNELS_CUDA_MOE_MXFP4_BF16_GEMM_SM90_CUH_
#define WEIR_KERNELS_CUDA_MOE_MXFP4_BF16_GEMM_SM90_CUH_

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/cuda/cp_async.cuh"
#include "kernels/cuda/dense/bf16_gemm_sm90.cuh"
#include "kernels/cuda/dense/fp8_block_gemm_params.h"
#include "kernels/cuda/dense/fp8_mma_sm90.cuh"
#include "kernels/cuda/dense/wgmma_bf16.cuh"
#include "kernels/cuda/grid_dependency.cuh"
#include "kernels/cuda/moe/mxfp4_grouped_gemm_params.h"
#include "kernels/cuda/rounding.cuh"
#include "kernels/cuda/tma.cuh"

namespace weir::kernels::cuda::moe::mxfp4_bf16 {

inline constexpr int kBn = 128;  // W rows (outputs) of a CTA
inline constexpr int kBm = 128;  // X rows of a CTA
inline constexpr int kConsumers = 256;   // two warpgroups
inline constexpr int kStages = 5;        // ring slots
inline constexpr int kTile = 128 * 128;  // one operand's bytes of a stage
inline constexpr int kSlot = 2 * kTile;  // the widened W tile, then X's
inline constexpr int kUnitsPerStage = kBn * (kMxfp4Bf16StageK / 32);  // (row, K block of 32)
inline constexpr int kDepth = 4;  // a widener's stages of raw codes: kDepth - 1 in flight
inline constexpr int kRawCodes = kStages * kSlot;
// Each stage's units, whoever widens them, in raw slots of 16 code bytes and
// a 4-byte scale word.
inline constexpr int kRawScales = kRawCodes + kDepth * kUnitsPerStage * 16;
inline constexpr int kSharedBytes = kRawScales + kDepth * kUnitsPerStage * 4;
// The CTA's threads with `widener_warps` warps widening (4 or 8; a multiple
// of 4, so the consumers' warpgroups stay aligned).
constexpr int ThreadsWith(int widener_warps) { return 32 * widener_warps + kConsumers; }
static_assert(kSharedBytes + dense::fp8_gemm::kWgmmaSmemSlack <= 227 * 1024,
              "an SM's shared memory");
static_assert(kRawCodes % 1024 == 0 && kSlot % 1024 == 0, "swizzled slots");

struct Args {
  CUtensorMap x_map;  // [1][rows][2 k] bytes, boxes of 128 rows x 128 bytes
  // The same rows in boxes of kMxfp4Bf16TailRows rows (Mxfp4Bf16GroupedGemmParams::
  // tail_rows: the 256-row tile's tail box; unused otherwise).
  CUtensorMap x_tail_map;
  const uint16_t* x;  // a valid 16-byte aligned address for zero-filling copies
  const int64_t* offsets;
  const uint8_t* const* w;
  const uint8_t* const* w_scales;
  void* y;
  const int32_t* row_role;
  int role;
  int64_t rows, n, k;
  int groups;
  bool bf16_out, round_f32;
  bool ballot_search;     // Mxfp4Bf16GroupedGemmParams::ballot_group_search
  E2m1Bf16Tables tables;  // E2m1x4ToBf16x2's (the launcher's defaults)
  // The gate / up / SwiGLU form (Mxfp4Bf16GroupedGemmParams::swiglu): w
  // holds the gate's weights, w_up the up product's, n the intermediate
  // size; h's FP8 form goes to h_codes / h_scales.
  const uint8_t* const* w_up;
  const uint8_t* const* w_up_scales;
  const float* route_weight;
  uint8_t* h_codes;
  uint8_t* h_scales;
  uint16_t* h_bf16;  // the decode form's SwiGLU launch: h's bf16 values too, or null
  float limit;
  bool round_bf16;
};

__device__ __forceinline__ uint32_t PrmtB32(uint32_t a, uint32_t b, uint32_t selector) {
  uint32_t d;
  asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(selector));
  return d;
}

// Eight e2m1 codes (nibble i of `word` is element i) under the scale factor
// `s` (ScaleOf of the E8M0 byte) -> out[i], the bf16x2 of elements 2i (low
// half) and 2i + 1: each code's exact f16 (E2m1x4ToF16High), widened to fp32,
// times s in fp32 (exact for every finite scale), rounded to bf16 (nearest
// even): Mxfp4WeightBf16Bits' bits (for scale 0xFF a NaN, not its payload).
__device__ __forceinline__ void Mxfp4ToBf16Eight(uint32_t word, float s, uint32_t (&out)[4]) {
  const auto prmt = [](uint32_t a, uint32_t b, uint32_t c) { return PrmtB32(a, b, c); };
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const uint32_t high = E2m1x4ToF16High(word >> (16 * h), prmt);
#pragma unroll
    for (int q = 0; q < 2; ++q) {
      const uint32_t pair = PrmtB32(high, 0u, q == 0 ? kF16x2Of01 : kF16x2Of23);
      const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&pair));
      const __nv_bfloat162 b = __floats2bfloat162_rn(__fmul_rn(f.x, s), __fmul_rn(f.y, s));
      out[2 * h + q] = *reinterpret_cast<const uint32_t*>(&b);
    }
  }
}

// The same eight codes under a scale byte for which
// Mxfp4ScaleMultipliesInBf16 holds, `scale2` its bf16x2 (2^(scale - 127) in
// both halves): the codes' exact bf16 values from the prmt tables
// (E2m1x4ToBf16x2), times the scale by one bf16x2 multiply a pair (nearest
// even: the product is exact or overflows, so Mxfp4WeightBf16Bits' bits).
// About a third of Mxfp4ToBf16Eight's instructions.
__device__ __forceinline__ void Mxfp4ToBf16EightBf16Mul(uint32_t word, uint32_t scale2,
                                                        const E2m1Bf16Tables& tables,
                                                        uint32_t (&out)[4]) {
  const auto prmt = [](uint32_t a, uint32_t b, uint32_t c) { return PrmtB32(a, b, c); };
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    uint32_t pairs[2];
    E2m1x4ToBf16x2(word >> (16 * h), prmt, pairs, tables);
#pragma unroll
    for (int q = 0; q < 2; ++q) {
      asm("mul.rn.bf16x2 %0, %1, %2;\n" : "=r"(out[2 * h + q]) : "r"(pairs[q]), "r"(scale2));
    }
  }
}

// Shared loads of what this thread's own cp.async brought, ordered after its
// wait (volatile, with a memory clobber, so the compiler keeps them there).
__device__ __forceinline__ void LoadRaw128(uint32_t addr, uint32_t (&v)[4]) {
  asm volatile("ld.shared.v4.b32 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(v[0]), "=r"(v[1]), "=r"(v[2]), "=r"(v[3])
               : "r"(addr)
               : "memory");
}
__device__ __forceinline__ uint32_t LoadRaw32(uint32_t addr) {
  uint32_t v;
  asm volatile("ld.shared.b32 %0, [%1];\n" : "=r"(v) : "r"(addr) : "memory");
  return v;
}

// The CTA's place in the compact grid: blockIdx.y numbers the row tiles of
// groups 0, 1, ... in order (ceil(rows / 128) + groups items cover them);
// past the last, group -1: nothing to do (uniform over the CTA, so the
// caller returns before any barrier).
struct GroupTile {
  int group = -1;
  int64_t begin = 0, end = 0;  // the group's rows (clamped offsets)
  int64_t tile = 0;            // the CTA's row tile within the group
};

// `rows_per_tile`: the X rows of a CTA (kBm, or the register form's kRows);
// `tail`: Mxfp4Bf16GroupTiles'. A walk over the groups in turn, each waiting on
// its group's offsets.
__device__ __forceinline__ GroupTile GroupTileWalk(const Args& a, int rows_per_tile, int tail) {
  int64_t tile = blockIdx.y;
  for (int g = 0; g < a.groups; ++g) {
    const int64_t b = min(max(a.offsets[g], int64_t{0}), a.rows);
    const int64_t e = min(max(a.offsets[g + 1], int64_t{0}), a.rows);
    const int64_t tiles = Mxfp4Bf16GroupTiles(e - b, rows_per_tile, tail);
    if (tile < tiles) return GroupTile{g, b, e, tile};
    tile -= tiles;
  }
  return GroupTile{};
}

// The same place found by whole warps (every lane, converged; each gets the
// result), with a.ballot_search: the groups' tile counts 32 at a time, a
// lane a group, their running sum by shuffles and the group holding the
// CTA's tile by a ballot (the route's ncu, thirty-ninth session: a fifth to
// a third of its warps' samples were in the walk, its compact grid's empty
// CTAs walking every group). The first group whose running count of tiles
// passes blockIdx.y, as the walk finds it; a group's count is capped at 2^16
// tiles (more than any grid.y holds, so no answer moves) to keep the sums in
// 32 bits.
__device__ __forceinline__ GroupTile GroupTileOf(const Args& a, int rows_per_tile = kBm,
                                                 int tail = 0) {
  if (!a.ballot_search) return GroupTileWalk(a, rows_per_tile, tail);  // uniform over the grid
  const int lane = static_cast<int>(threadIdx.x) % 32;
  int tile = static_cast<int>(blockIdx.y);
  for (int g0 = 0; g0 < a.groups; g0 += 32) {
    const int g = g0 + lane;
    int64_t b = 0, e = 0;
    int tiles = 0;
    if (g < a.groups) {
      b = min(max(a.offsets[g], int64_t{0}), a.rows);
      e = min(max(a.offsets[g + 1], int64_t{0}), a.rows);
      tiles =
          static_cast<int>(min(Mxfp4Bf16GroupTiles(e - b, rows_per_tile, tail), int64_t{1} << 16));
    }
    int through = tiles;  // the tiles of groups g0 .. g
#pragma unroll
    for (int off = 1; off < 32; off *= 2) {
      const int before = __shfl_up_sync(0xffffffffu, through, off);
      if (lane >= off) through += before;
    }
    const int total = __shfl_sync(0xffffffffu, through, 31);
    if (tile < total) {
      const int at = __ffs(__ballot_sync(0xffffffffu, tile < through)) - 1;
      const int first = __shfl_sync(0xffffffffu, through - tiles, at);
      return GroupTile{g0 + at, __shfl_sync(0xffffffffu, b, at), __shfl_sync(0xffffffffu, e, at),
                       tile - first};
    }
    tile -= total;
  }
  return GroupTile{};
}

// True when expert weight pointers cannot be read by the kernels (null or
// misaligned): the expert's rows are NaN (Mxfp4GroupedGemm's rule).
__device__ __forceinline__ bool UnreadableWeight(const uint8_t* w, const uint8_t* ws) {
  return w == nullptr || ws == nullptr || reinterpret_cast<uintptr_t>(w) % 16 != 0 ||
         reinterpret_cast<uintptr_t>(ws) % 4 != 0;
}

// The consumers' epilogue: consumer warp `cw` (0 - 7) holds W rows 16 cw ..
// 16 cw + 15 of the tile (output columns n0 + those) for the CTA's 8 kNi X
// rows m0 ..; writes the rows of the asked role as `a.y`'s form wants.
template <int kNi>
__device__ __forceinline__ void StoreOutputs(const Args& a, float (&d)[4 * kNi], int cw, int lane,
                                             int64_t begin, int64_t m0, int64_t m, int64_t n0) {
  using dense::fp8_gemm::ForEachOutput;
  using dense::fp8_gemm::PinRegister;
  float acc[1][kNi][4];
#pragma unroll
  for (int i = 0; i < kNi; ++i) {
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      PinRegister(d[4 * i + r]);
      acc[0][i][r] = d[4 * i + r];
    }
  }
  const int32_t* role = a.row_role != nullptr ? a.row_role + begin : nullptr;
  const uint32_t rows = dense::bf16_gemm::RowsOfRole<kNi>(role, a.role, m0, m, lane);
  ForEachOutput(acc, lane, n0 + cw * 16, m0, a.n, m, [&](int64_t gm, int64_t gn, float v) {
    if (!dense::bf16_gemm::RowHasRole(rows, gm - m0)) return;
    const int64_t at = (begin + gm) * a.n + gn;
    if (a.bf16_out) {
      static_cast<__nv_bfloat16*>(a.y)[at] = __float2bfloat16_rn(v);
    } else {
      static_cast<float*>(a.y)[at] = a.round_f32 ? RoundToBf16(v) : v;
    }
  });
}

template <int kWidenerWarps>
__global__ void __launch_bounds__(ThreadsWith(kWidenerWarps), 1)
    Mxfp4Bf16GroupedKernel(const __grid_constant__ Args a) {
  GridDependencyPrologue();
  static_assert(kWidenerWarps % 4 == 0 && kUnitsPerStage % (32 * kWidenerWarps) == 0);
  constexpr int kWideners = 32 * kWidenerWarps;
  constexpr int kUnits = kUnitsPerStage / kWideners;  // a widener's units a stage
  using dense::Fp8GemmSwizzledOffset;
  using dense::fp8_gemm::AlignSharedTo1024;
  using dense::fp8_gemm::DescriptorOf;
  using dense::fp8_gemm::FenceSharedForAsyncProxy;
  using dense::fp8_gemm::ScaleOf;
  using dense::fp8_gemm::StoreShared128;
  using dense::fp8_gemm::SwizzledKMajorDescriptorLo;
  using dense::fp8_gemm::WgmmaCommit;
  using dense::fp8_gemm::WgmmaFence;
  using dense::fp8_gemm::WgmmaWait;

  const GroupTile gt = GroupTileOf(a);
  if (gt.group < 0) return;
  const int group = gt.group;
  const int64_t begin = gt.begin;
  const int64_t m = gt.end - begin;  // the group's rows; this CTA's are m0 .. m0 + 127 of them
  const int64_t m0 = gt.tile * kBm;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kBn;
  const int stages = static_cast<int>(a.k / kMxfp4Bf16StageK);

  __shared__ __align__(8) uint64_t bars[2 * kStages];
  extern __shared__ __align__(128) uint8_t smem_raw[];
  const uint32_t base = SharedAddress(AlignSharedTo1024(smem_raw));
  const uint32_t full0 = SharedAddress(&bars[0]);
  const uint32_t empty0 = full0 + 8 * kStages;
  const int tid = static_cast<int>(threadIdx.x);
  const int warp = tid >> 5;
  const int lane = tid & 31;
  if (tid == 0) {
    for (int s = 0; s < kStages; ++s) {
      MbarrierInit(full0 + 8 * s, 1 + kWideners);  // thread 0's expect_tx + the wideners
      MbarrierInit(empty0 + 8 * s, 2 * 128);       // the consumers
    }
    FenceMbarrierInit();
  }
  __syncthreads();

  if (warp < kWidenerWarps) {
    const int t = tid;  // 0 .. kWideners - 1
    const uint8_t* const w = a.w[group];
    const uint8_t* const ws = a.w_scales[group];
    // A weight the kernel cannot read gives NaN rows (Mxfp4GroupedGemm's rule).
    const bool bad = UnreadableWeight(w, ws);
    const int64_t code_row = a.k / 2, scale_row = a.k / 32;
    // The widening's prmt tables, from the kernel's parameters: the
    // assembler cannot fold them into immediates, which it would rebuild in
    // a register before every prmt that reads one as its first operand.
    const E2m1Bf16Tables tables = a.tables;
    const uint32_t raw_codes = base + kRawCodes, raw_scales = base + kRawScales;
    // Raw slot d, unit j of this thread: consecutive threads, consecutive bytes.
    const auto raw = [&](int d, int j) { return (d * kUnits + j) * kWideners + t; };
    const auto issue = [&](int i) {
      const int d = i % kDepth;
#pragma unroll
      for (int j = 0; j < kUnits; ++j) {
        const int u = t + kWideners * j;
        const int row = u >> 1, b = u & 1;
        const int64_t gn = n0 + row;
        const bool ok = !bad && u < kUnitsPerStage && gn < a.n;
        const void* codes = a.x;
        const void* scales = a.x;
        if (ok) {
          codes = w + gn * code_row + i * 32 + b * 16;
          scales = ws + gn * scale_row + ((2 * i + b) & ~3);
        }
        CpAsync16(raw_codes + raw(d, j) * 16, codes, ok);
        dense::fp8_gemm::CpAsync4(raw_scales + raw(d, j) * 4, scales, ok);
      }
      CpAsyncCommit();
    };
    // One group committed a stage (empty past the last), so wait_group
    // kDepth - 1 always means "stage i has landed".
#pragma unroll
    for (int i = 0; i < kDepth - 1; ++i) {
      if (i < stages) {
        issue(i);
      } else {
        CpAsyncCommit();
      }
    }
    for (int i = 0; i < stages; ++i) {
      if (i + kDepth - 1 < stages) {
        issue(i + kDepth - 1);
      } else {
        CpAsyncCommit();
      }
      const int slot = i % kStages;
      if (i >= kStages) MbarrierWait(empty0 + 8 * slot, ((i / kStages) - 1) & 1);
      if (t == 0) {  // the stage's X box, now that the slot is free
        MbarrierArriveExpectTx(full0 + 8 * slot, kTile);
        TmaLoadRows(base + slot * kSlot + kTile, &a.x_map, full0 + 8 * slot,
                    i * kMxfp4Bf16StageK * 2, static_cast<int>(begin + m0), 0);
      }
      CpAsyncWait<kDepth - 1>();  // this thread's copies of stage i have landed
      const uint32_t w16 = base + slot * kSlot;
      const int d = i % kDepth;
#pragma unroll
      for (int j = 0; j < kUnits; ++j) {
        const int u = t + kWideners * j;
        if (u >= kUnitsPerStage) break;
        const int row = u >> 1, b = u & 1;
        uint32_t c[4];
        LoadRaw128(raw_codes + raw(d, j) * 16, c);
        const uint32_t scale_word = LoadRaw32(raw_scales + raw(d, j) * 4);
        const uint32_t scale = (scale_word >> (8 * ((2 * i + b) & 3))) & 0xFFu;
        if (!bad && Mxfp4ScaleMultipliesInBf16(scale)) {  // every quantizer's scale
          const uint32_t scale2 = (scale << 7) * 0x00010001u;
#pragma unroll
          for (int q = 0; q < 4; ++q) {
            uint32_t o[4];
            Mxfp4ToBf16EightBf16Mul(c[q], scale2, tables, o);
            StoreShared128(w16 + Fp8GemmSwizzledOffset(row, 4 * b + q), o[0], o[1], o[2], o[3]);
          }
        } else {  // scales 0, 1 and 0xFF (NaN), or an unreadable weight (NaN)
          float s = ScaleOf(scale_word, (2 * i + b) & 3);
          if (bad) s = __uint_as_float(0x7FC00000u);
#pragma unroll
          for (int q = 0; q < 4; ++q) {
            uint32_t o[4];
            Mxfp4ToBf16Eight(c[q], s, o);
            StoreShared128(w16 + Fp8GemmSwizzledOffset(row, 4 * b + q), o[0], o[1], o[2], o[3]);
          }
        }
      }
      // The W tile is read by wgmma (the async proxy).
      FenceSharedForAsyncProxy();
      MbarrierArrive(full0 + 8 * slot);
    }
    return;
  }

  // ---- consumers: Bf16GemmWsKernel's loop ----
  const int wg = (warp - kWidenerWarps) / 4;  // W rows 64 wg .. 64 wg + 63 of the tile
  float d[64];
#pragma unroll
  for (int r = 0; r < 64; ++r) d[r] = 0.0f;
  for (int i = 0; i < stages; ++i) {
    const int slot = i % kStages;
    MbarrierWait(full0 + 8 * slot, (i / kStages) & 1);
    const uint32_t w_lo = SwizzledKMajorDescriptorLo(base + slot * kSlot + wg * 64 * 128);
    const uint32_t x_lo = SwizzledKMajorDescriptorLo(base + slot * kSlot + kTile);
    WgmmaFence();
#pragma unroll
    for (int s = 0; s < 4; ++s) {
      dense::bf16_gemm::WgmmaBf16N128(DescriptorOf(w_lo + ((32 * s) >> 4)),
                                      DescriptorOf(x_lo + ((32 * s) >> 4)), d);
    }
    WgmmaCommit();
    WgmmaWait(1);
    if (i > 0) MbarrierArrive(empty0 + 8 * ((i - 1) % kStages));
  }
  WgmmaWait(0);
  StoreOutputs<16>(a, d, warp - kWidenerWarps, lane, begin, m0, m, n0);
}

}  // namespace weir::kernels::cuda::moe::mxfp4_bf16

#endif  // WEIR_KERNELS_CUDA_MOE_MXFP4_BF16_GEMM_SM90_CUH_
