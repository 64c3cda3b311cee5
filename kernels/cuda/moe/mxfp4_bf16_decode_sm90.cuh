// kernels/cuda/moe/mxfp4_bf16_decode_sm90.cuh — Mxfp4Bf16GroupedGemm's
// decode form (Mxfp4Bf16GroupedGemmParams::decode_mma): a decode step's few
// rows an expert (8 or 16 a CTA) on mma.sync m16n8k16 bf16, with no widened
// W tile and no CTA barrier a stage. Device code only, on the other forms'
// helpers (mxfp4_bf16_gemm_sm90.cuh, mxfp4_bf16_rs_sm90.cuh: SwigluFp8Unit);
// included by mxfp4_bf16_gemm_sm90.cu.
//
// Why: at a decode step's 8 rows an expert every local expert's W is read
// once and multiplied by a handful of X rows, so the product is a stream of
// weights through the widening. The FP8 decode kernel (kMmaF16) spends about
// 0.21 warp instructions a weight on its per-32 block sums and folds (an
// issue ceiling near 0.6 of copy); the register form's wgmma tiles at 8 rows
// wait on their ring and barriers (the EP8 slice's batch 64 on the route:
// 74 ms a step against 42). Here each weight is widened once, straight into
// the A fragments, and summed in fp32 over all of K: about 0.1 warp
// instructions a weight (kernels/cuda/moe/README.md, item R).
//
//  * Grid and rows: the route's compact grid (GroupTileOf over kRows rows a
//    tile); blockIdx.x the W tile of kMxfp4Bf16DecodeWarps x 16 rows.
//  * X: thread 0 brings the tile's X rows (bf16, the route's rx16) chunk by
//    chunk of Mxfp4Bf16DecodeChunkK of K, a bulk copy a row, into two
//    buffers of padded rows (Mxfp4Bf16DecodeXPitch) counted on an mbarrier
//    each; chunk c + 1 lands while chunk c is read, and a CTA barrier at each
//    chunk's start frees the buffer the next chunk refills. Rows past the
//    tile's are never copied (their columns of the sums are never stored).
//  * W: warp w streams its 16 rows (n0 + 16 w ..; gated, those rows of the
//    gate's W and of the up product's) through its own ring of
//    kMxfp4Bf16DecodeDepth slots, a stage 128 of K: each lane copies two (or
//    four) 16-byte code units and a row's scale word (cp.async), the copies
//    kMxfp4Bf16DecodeDepth - 1 stages ahead; a stage is consumed after the
//    lane's wait_group and a __syncwarp.
//  * A stage's math, lane (g, t): its rows g and g + 8, 64 code bytes each
//    (a quad the same bytes), byte t of each word gathered by prmt
//    (Mxfp4Bf16GatherQuadByte) and widened with the row's UE8M0 scale to the
//    exact bf16 values (Mxfp4ToBf16EightBf16Mul for a quantizer's scales, all
//    of the stage's through fp32 when one of its scales is rare or the weight
//    unreadable: the register form's one test a stage), which are the mma A
//    fragments of the stage's 8 K steps (Mxfp4Bf16FragmentRegister); X's B
//    fragments by one ldmatrix.x4 a K block of 32 and n tile; two mma a block
//    and n tile (and matrix), in K order, into the same fp32 accumulators.
//    A stage goes in two halves of 64 of K, so 16 A registers a matrix live.
//  * The gated form (swiglu) stages its gate and up sums over the X buffers
//    after the loop and makes h's FP8 form of the CTA's 128 columns as the
//    256-row tile's SwiGLU form does; the plain form stores as the route.
// The sums are those of every other form (acc from +0, each K step's 16
// products added in ascending K order; bf16 mma.sync and wgmma chains give
// the same bits on Hopper), and the epilogue is theirs (StoreOutputs), so a
// row's bits are Bf16Gemm's over the widened weight.
#ifndef WEIR_KERNELS_CUDA_MOE_MXFP4_BF16_DECODE_SM90_CUH_
#define WEIR_KERNELS_CUDA_MOE_MXFP4_BF16_DECODE_SM90_CUH_

#include <cstdint>
#include <type_traits>

#include "kernels/cuda/cp_async.cuh"
#include "kernels/cuda/decode/swiglu.cuh"
#include "kernels/cuda/dense/act_quant_fp8.cuh"
#include "kernels/cuda/dense/fp8_mma_sm90.cuh"
#include "kernels/cuda/grid_dependency.cuh"
#include "kernels/cuda/mma_bf16.cuh"
#include "kernels/cuda/moe/mxfp4_bf16_gemm_sm90.cuh"
#include "kernels/cuda/moe/mxfp4_bf16_rs_sm90.cuh"
#include "kernels/cuda/moe/mxfp4_grouped_gemm_params.h"
#include "kernels/cuda/tma.cuh"

namespace weir::kernels::cuda::moe::mxfp4_bf16 {

inline constexpr int kDecodeThreads = kMxfp4Bf16DecodeWarps * 32;

// `bytes` (a multiple of 16) from global `src` (16-byte aligned) to shared
// `dst` (16-byte aligned) by the bulk-copy unit, counted on `bar`.
__device__ __forceinline__ void BulkCopyToShared(uint32_t dst, const void* src, uint32_t bytes,
                                                 uint32_t bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::
          "r"(dst),
      "l"(src), "r"(bytes), "r"(bar)
      : "memory");
}

// kRows: X rows a CTA (8 or 16; kRows / 8 mma n tiles, of which those
// holding rows run). kGated (Mxfp4Bf16GroupedGemmParams::swiglu): a warp's
// ring holds the same 16 rows of the gate's and the up product's W, its two
// sets of sums staged in shared memory after the loop, and the CTA makes
// h's FP8 form of its 128 columns from them as the route's SwiGLU form does
// (SwigluOf, ActQuantEight: the bits of Swiglu's FP8 form over the two
// products' fp32 outputs), and with h_bf16 the bf16 values of those codes
// (ActQuantEight's dq8, Fp8ActBf16's bits).
template <int kRows, bool kGated>
__global__ void __launch_bounds__(kDecodeThreads, 2)
    Mxfp4Bf16DecodeKernel(const __grid_constant__ Args a) {
  GridDependencyPrologue();
  static_assert(kRows == 8 || kRows == 16);
  constexpr int kNi = kRows / 8;
  constexpr int kMats = kGated ? 2 : 1;  // W matrices a warp multiplies
  constexpr Mxfp4Bf16DecodeLayout kL = Mxfp4Bf16DecodeLayoutOf(kRows, kGated);
  constexpr int kDepth = kMxfp4Bf16DecodeDepth;
  constexpr int kStageK = kMxfp4Bf16DecodeStageK;
  constexpr int kChunkK = Mxfp4Bf16DecodeChunkK(kGated);
  constexpr int kChunkStages = kChunkK / kStageK;
  constexpr int kPitch = Mxfp4Bf16DecodeXPitch(kGated);
  constexpr int kWRows = Mxfp4Bf16DecodeWRows(kGated);
  constexpr int kUnits = kWRows * 4 / 32;  // 16-byte code units a lane a stage
  static_assert(kChunkK % kStageK == 0 && kStageK == 128, "four K blocks a stage");
  static_assert(kWRows <= 32, "a lane a scale word");
  static_assert(!kGated || Mxfp4Bf16DecodeStagedFloats(kRows) * 4 <= 2 * kL.x_buffer,
                "the gated form's staged sums fit the X buffers");
  using dense::fp8_gemm::CpAsync4;
  using dense::fp8_gemm::LdMatrixX4;
  using dense::fp8_gemm::ScaleOf;

  const GroupTile gt = GroupTileOf(a, kRows);
  if (gt.group < 0) return;  // uniform over the CTA
  const int group = gt.group;
  const int64_t begin = gt.begin;
  const int64_t m = gt.end - begin;  // the group's rows; this CTA's are m0 .. m0 + kRows - 1
  const int64_t m0 = gt.tile * kRows;
  const int tile_rows = static_cast<int>(min(m - m0, int64_t{kRows}));
  const int active_ni = (tile_rows + 7) >> 3;  // uniform
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * (16 * kMxfp4Bf16DecodeWarps);
  const int stages = static_cast<int>(a.k / kStageK);
  const int chunks = static_cast<int>((a.k + kChunkK - 1) / kChunkK);

  __shared__ __align__(8) uint64_t x_bars[2];
  extern __shared__ __align__(128) uint8_t smem_raw[];
  const uint32_t base = SharedAddress(smem_raw);
  const uint32_t bar0 = SharedAddress(&x_bars[0]);
  const int tid = static_cast<int>(threadIdx.x);
  const int warp = tid >> 5;
  const int lane = tid & 31;

  // X chunk c (K kChunkK c .. and at most kChunkK of it) of the tile's rows
  // into buffer c % 2, counted on its barrier. Thread 0 only.
  const auto load_chunk = [&](int c) {
    const int64_t k0 = int64_t{c} * kChunkK;
    const uint32_t bytes = static_cast<uint32_t>(min(a.k - k0, int64_t{kChunkK}) * 2);
    const uint32_t buffer = base + (c & 1) * kL.x_buffer;
    const uint32_t bar = bar0 + 8 * (c & 1);
    MbarrierArriveExpectTx(bar, bytes * static_cast<uint32_t>(tile_rows));
    for (int r = 0; r < tile_rows; ++r) {
      BulkCopyToShared(buffer + r * kPitch, a.x + (begin + m0 + r) * a.k + k0, bytes, bar);
    }
  };
  if (tid == 0) {
    MbarrierInit(bar0, 1);
    MbarrierInit(bar0 + 8, 1);
    FenceMbarrierInit();
  }
  __syncthreads();
  if (tid == 0) {
    load_chunk(0);
    if (chunks > 1) load_chunk(1);
  }

  const uint8_t* const w0 = a.w[group];
  const uint8_t* const ws0 = a.w_scales[group];
  const uint8_t* const w1 = kGated ? a.w_up[group] : nullptr;
  const uint8_t* const ws1 = kGated ? a.w_up_scales[group] : nullptr;
  // A weight the kernel cannot read gives NaN rows (Mxfp4GroupedGemm's rule);
  // gated, either weight makes the whole expert's h NaN.
  const bool bad = UnreadableWeight(w0, ws0) || (kGated && UnreadableWeight(w1, ws1));
  const int64_t code_row = a.k / 2, scale_row = a.k / 32;
  const int64_t warp_n0 = n0 + 16 * warp;  // this warp's first output column
  const uint32_t ring = base + kL.ring + warp * kL.ring_bytes;

  // This lane's copies of a stage, their sources at K = 0 and their advance
  // a stage (0 where the copy only zero-fills: a row past n, an unreadable
  // weight), so a stage's source is one multiply-add of its index.
  const uint8_t* unit_src[kUnits];
  uint32_t unit_dst[kUnits];
  bool unit_ok[kUnits];
  int unit_step[kUnits];
#pragma unroll
  for (int j = 0; j < kUnits; ++j) {
    const int u = lane + 32 * j;
    const int row = Mxfp4Bf16DecodeUnitRow(u);
    const int64_t gn = warp_n0 + (row & 15);
    unit_ok[j] = !bad && gn < a.n;
    unit_src[j] = unit_ok[j] ? (row >= 16 ? w1 : w0) + gn * code_row + 16 * (u & 3)
                             : reinterpret_cast<const uint8_t*>(a.x);
    unit_step[j] = unit_ok[j] ? kStageK / 2 : 0;
    unit_dst[j] = static_cast<uint32_t>(Mxfp4Bf16DecodeUnitOffset(u));
  }
  const int scale_row_of_lane = lane % kWRows;
  const int64_t scale_n = warp_n0 + (scale_row_of_lane & 15);
  const bool scale_ok = lane < kWRows && !bad && scale_n < a.n;
  const uint8_t* const scale_src = scale_ok
                                       ? (scale_row_of_lane >= 16 ? ws1 : ws0) + scale_n * scale_row
                                       : reinterpret_cast<const uint8_t*>(a.x);
  const int scale_step = scale_ok ? 4 : 0;
  const uint32_t scale_dst = kL.slot_scales + 4 * scale_row_of_lane;
  const auto issue = [&](int s) {
    const uint32_t slot = ring + (s % kDepth) * kL.slot_bytes;
#pragma unroll
    for (int j = 0; j < kUnits; ++j) {
      CpAsync16(slot + unit_dst[j], unit_src[j] + s * unit_step[j], unit_ok[j]);
    }
    if (kWRows == 32 || lane < kWRows)
      CpAsync4(slot + scale_dst, scale_src + s * scale_step, scale_ok);
    CpAsyncCommit();
  };

  const E2m1Bf16Tables tables = a.tables;
  const uint32_t c = static_cast<uint32_t>(lane & 3);
  const int g = lane >> 2;
  const auto prmt = [](uint32_t x, uint32_t y, uint32_t sel) { return PrmtB32(x, y, sel); };
  const uint32_t x_lane = static_cast<uint32_t>(Mxfp4Bf16DecodeXOffset(lane, 0, 0, kGated));
  const bool row_in[2] = {warp_n0 + g < a.n, warp_n0 + g + 8 < a.n};  // the lane's rows g, g + 8
  float acc[kMats][kNi][4];
#pragma unroll
  for (int mat = 0; mat < kMats; ++mat) {
#pragma unroll
    for (int ni = 0; ni < kNi; ++ni) {
#pragma unroll
      for (int r = 0; r < 4; ++r) acc[mat][ni][r] = 0.0f;
    }
  }

  // One group committed a stage (empty past the last), so wait_group
  // kDepth - 2 after the loop's own commit count means "stage s has landed".
#pragma unroll
  for (int s = 0; s < kDepth - 1; ++s) {
    if (s < stages) {
      issue(s);
    } else {
      CpAsyncCommit();
    }
  }
  for (int s = 0; s < stages; ++s) {
    const int chunk = s / kChunkStages;
    if (s % kChunkStages == 0) {
      if (chunk >= 1) {
        __syncthreads();  // every warp is done with chunk - 1: its buffer is free
        if (tid == 0 && chunk + 1 < chunks) load_chunk(chunk + 1);
      }
      MbarrierWait(bar0 + 8 * (chunk & 1), (chunk >> 1) & 1);
    }
    CpAsyncWait<kDepth - 2>();  // this lane's copies of stage s have landed
    __syncwarp();               // and every lane's; slot (s - 1) % kDepth is read
    if (s + kDepth - 1 < stages) {
      issue(s + kDepth - 1);
    } else {
      CpAsyncCommit();
    }
    const uint32_t slot = ring + (s % kDepth) * kL.slot_bytes;
    // The scale words of the lane's rows (g, g + 8 of each matrix): every
    // scale byte of its stage multiplies in bf16, or the stage widens
    // through fp32 (the register form's one test a stage).
    uint32_t scale_word[kMats][2];
    bool plain = !bad;
#pragma unroll
    for (int mat = 0; mat < kMats; ++mat) {
#pragma unroll
      for (int q = 0; q < 2; ++q) {
        scale_word[mat][q] = LoadRaw32(slot + kL.slot_scales + 4 * (16 * mat + g + 8 * q));
        // A row past n (its codes and scale word zero-filled, its sums never
        // stored) widens as scale 127 (1.0: zeros), so it keeps the warp on
        // the bf16 multiply.
        if (!row_in[q]) scale_word[mat][q] = 0x7F7F7F7Fu;
      }
      plain = plain && Mxfp4ScaleWordsMultiplyInBf16(scale_word[mat][0], scale_word[mat][1]);
    }
    // One path for the whole warp (the mma.sync and ldmatrix after the
    // branch are warp-wide): the fp32 path gives every scale's bits, so a
    // lane taking it for its neighbour's rare scale changes nothing.
    plain = __all_sync(0xffffffffu, plain);
    const uint32_t x_stage =
        base + (chunk & 1) * kL.x_buffer + 2 * (s % kChunkStages) * kStageK + x_lane;
    // The stage in two halves of 64 of K (K blocks 2 h, 2 h + 1): f[mat][4 s'
    // + r] the A registers of the half's K step s' (Mxfp4Bf16FragmentRegister).
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      uint32_t f[kMats][16];
      const auto widen = [&](auto plain_scales) {
#pragma unroll
        for (int mat = 0; mat < kMats; ++mat) {
#pragma unroll
          for (int q = 0; q < 2; ++q) {
            const uint32_t row = slot + 64 * (16 * mat + g + 8 * q);
#pragma unroll
            for (int bb = 0; bb < 2; ++bb) {
              const int b = 2 * h + bb;  // the K block of the stage
              uint32_t words[4];
              LoadRaw128(row + 16 * b, words);
              const uint32_t v = Mxfp4Bf16GatherQuadByte(words, c, prmt);
              uint32_t o[4];
              if constexpr (decltype(plain_scales)::value) {
                Mxfp4ToBf16EightBf16Mul(v, Mxfp4ScaleBf16x2(scale_word[mat][q], b, prmt), tables,
                                        o);
              } else {
                const float sf =
                    bad ? __uint_as_float(0x7FC00000u) : ScaleOf(scale_word[mat][q], b);
                Mxfp4ToBf16Eight(v, sf, o);
              }
#pragma unroll
              for (int j = 0; j < 4; ++j) f[mat][Mxfp4Bf16FragmentRegister(bb, j, q)] = o[j];
            }
          }
        }
      };
      if (plain) {
        widen(std::true_type{});
      } else {
        widen(std::false_type{});
      }
#pragma unroll
      for (int bb = 0; bb < 2; ++bb) {
        const int b = 2 * h + bb;
#pragma unroll
        for (int ni = 0; ni < kNi; ++ni) {
          if (ni < active_ni) {
            uint32_t r0, r1, r2, r3;
            LdMatrixX4(x_stage + ni * 8 * kPitch + 64 * b, r0, r1, r2, r3);
#pragma unroll
            for (int mat = 0; mat < kMats; ++mat) {
              const uint32_t lo[4] = {f[mat][8 * bb], f[mat][8 * bb + 1], f[mat][8 * bb + 2],
                                      f[mat][8 * bb + 3]};
              const uint32_t hi[4] = {f[mat][8 * bb + 4], f[mat][8 * bb + 5], f[mat][8 * bb + 6],
                                      f[mat][8 * bb + 7]};
              MmaBf16M16N8K16(acc[mat][ni], lo, r0, r1);
              MmaBf16M16N8K16(acc[mat][ni], hi, r2, r3);
            }
          }
        }
      }
    }
  }
  CpAsyncWait<0>();
  if constexpr (!kGated) {
    float d[4 * kNi];
#pragma unroll
    for (int ni = 0; ni < kNi; ++ni) {
#pragma unroll
      for (int r = 0; r < 4; ++r) d[4 * ni + r] = acc[0][ni][r];
    }
    StoreOutputs<kNi>(a, d, warp, lane, begin, m0, m, n0);
  } else {
    // Every warp is done with the X buffers: the CTA's gate and up sums go
    // there as [X row][gate 0 - 127, up 0 - 127] (Mxfp4Bf16DecodeStagedFloats).
    __syncthreads();
    float* const staged = reinterpret_cast<float*>(smem_raw);
    constexpr int kStride = kMxfp4Bf16DecodeStagedStride;
#pragma unroll
    for (int mat = 0; mat < 2; ++mat) {
#pragma unroll
      for (int ni = 0; ni < kNi; ++ni) {
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          const dense::Fp8GemmAccCoord at = dense::Fp8GemmAccumulatorCoord(lane, r);
          staged[(ni * 8 + at.m) * kStride + 128 * mat + 16 * warp + at.n] = acc[mat][ni][r];
        }
      }
    }
    __syncthreads();
    // Unit u: X row u / 16's columns 8 (u % 16) .. + 7, so four consecutive
    // lanes hold a 32-column block, as ActQuantEight wants (whole warps run
    // each pass: kRows x 16 units is a multiple of 32).
    constexpr int kUnitsOut = kRows * 16;
#pragma unroll 1
    for (int u = tid; u < kUnitsOut; u += kDecodeThreads) {
      const int token = u >> 4, col0 = 8 * (u & 15);
      SwigluFp8Unit<true>(a, staged + token * kStride, 128, col0, m0 + token < m && n0 + col0 < a.n,
                          begin + m0 + token, n0);
    }
  }
}

}  // namespace weir::kernels::cuda::moe::mxfp4_bf16

#endif  // WEIR_KERNELS_CUDA_MOE_MXFP4_BF16_DECODE_SM90_CUH_
