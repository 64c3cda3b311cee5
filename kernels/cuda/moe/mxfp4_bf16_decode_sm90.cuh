// kernels/cuda/moe/mxfp4_bf16_decode_sm90.cuh — Mxfp4Bf16GroupedGemm's
// decode form (Mxfp4Bf16GroupedGemmParams::decode_mma): a decode step's few
// rows an expert (8 or 16 a CTA) on mma.sync m16n8k16 bf16, with no widened
// W tile and no CTA barrier a stage. Device code only; included by
// mxfp4_bf16_gemm_sm90.cu after mxfp4_bf16_gemm_sm90.cuh.
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
//    chunk of kMxfp4Bf16DecodeChunkK of K, a bulk copy a row, into two
//    buffers of padded rows (kMxfp4Bf16DecodeXPitch) counted on an mbarrier
//    each; chunk c + 1 lands while chunk c is read, and a CTA barrier at each
//    chunk's start frees the buffer the next chunk refills. Rows past the
//    tile's are never copied (their columns of the sums are never stored).
//  * W: warp w streams its 16 rows (n0 + 16 w ..) through its own ring of
//    kMxfp4Bf16DecodeDepth slots, a stage 128 of K: each lane copies two
//    16-byte code units and lanes 0 - 15 a row's scale word (cp.async), the
//    copies kMxfp4Bf16DecodeDepth - 1 stages ahead; a stage is consumed after
//    the lane's wait_group and a __syncwarp.
//  * A stage's math, lane (g, t): its rows g and g + 8, 64 code bytes each
//    (a quad the same bytes), byte t of each word gathered by prmt
//    (Mxfp4Bf16GatherQuadByte) and widened with the row's UE8M0 scale to the
//    exact bf16 values (Mxfp4ToBf16EightBf16Mul for a quantizer's scales, all
//    of the stage's through fp32 when one of its scales is rare or the weight
//    unreadable: the register form's one test a stage), which are the mma A
//    fragments of the stage's 8 K steps (Mxfp4Bf16FragmentRegister); X's B
//    fragments by one ldmatrix.x4 a K block of 32 and n tile; two mma a block
//    and n tile, in K order, into the same fp32 accumulators.
// The sums are those of every other form (acc from +0, each K step's 16
// products added in ascending K order; bf16 mma.sync and wgmma chains give
// the same bits on Hopper), and the epilogue is theirs (StoreOutputs), so a
// row's bits are Bf16Gemm's over the widened weight.
#ifndef WEIR_KERNELS_CUDA_MOE_MXFP4_BF16_DECODE_SM90_CUH_
#define WEIR_KERNELS_CUDA_MOE_MXFP4_BF16_DECODE_SM90_CUH_

#include <cstdint>
#include <type_traits>

#include "kernels/cuda/cp_async.cuh"
#include "kernels/cuda/dense/fp8_mma_sm90.cuh"
#include "kernels/cuda/grid_dependency.cuh"
#include "kernels/cuda/mma_bf16.cuh"
#include "kernels/cuda/moe/mxfp4_bf16_gemm_sm90.cuh"
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
// holding rows run).
template <int kRows>
__global__ void __launch_bounds__(kDecodeThreads, 2)
    Mxfp4Bf16DecodeKernel(const __grid_constant__ Args a) {
  GridDependencyPrologue();
  static_assert(kRows == 8 || kRows == 16);
  constexpr int kNi = kRows / 8;
  constexpr Mxfp4Bf16DecodeLayout kL = Mxfp4Bf16DecodeLayoutOf(kRows);
  constexpr int kDepth = kMxfp4Bf16DecodeDepth;
  constexpr int kStageK = kMxfp4Bf16DecodeStageK;
  constexpr int kChunkK = kMxfp4Bf16DecodeChunkK;
  constexpr int kChunkStages = kChunkK / kStageK;
  constexpr int kPitch = kMxfp4Bf16DecodeXPitch;
  static_assert(kChunkK % kStageK == 0 && kStageK % 32 == 0);
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

  // X chunk c (K 1,024 c .. and at most 1,024 of it) of the tile's rows into
  // buffer c % 2, counted on its barrier. Thread 0 only.
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

  const uint8_t* const w = a.w[group];
  const uint8_t* const ws = a.w_scales[group];
  // A weight the kernel cannot read gives NaN rows (Mxfp4GroupedGemm's rule).
  const bool bad = UnreadableWeight(w, ws);
  const int64_t code_row = a.k / 2, scale_row = a.k / 32;
  const int64_t warp_n0 = n0 + 16 * warp;  // this warp's first W row
  const uint32_t ring = base + kL.ring + warp * kL.ring_bytes;

  // This lane's copies of a stage, their sources at K = 0 (a row past n, or
  // an unreadable weight, zero-fills and never advances its source).
  // A stage's source is one multiply-add of its index (step 0 where the copy
  // only zero-fills).
  const uint8_t* unit_src[2];
  uint32_t unit_dst[2];
  bool unit_ok[2];
  int unit_step[2];
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    const int u = lane + 32 * j;
    const int64_t gn = warp_n0 + Mxfp4Bf16DecodeUnitRow(u);
    unit_ok[j] = !bad && gn < a.n;
    unit_src[j] =
        unit_ok[j] ? w + gn * code_row + 16 * (u & 3) : reinterpret_cast<const uint8_t*>(a.x);
    unit_step[j] = unit_ok[j] ? kStageK / 2 : 0;
    unit_dst[j] = static_cast<uint32_t>(Mxfp4Bf16DecodeUnitOffset(u));
  }
  const int64_t scale_n = warp_n0 + (lane & 15);
  const bool scale_ok = lane < 16 && !bad && scale_n < a.n;
  const uint8_t* const scale_src =
      scale_ok ? ws + scale_n * scale_row : reinterpret_cast<const uint8_t*>(a.x);
  const int scale_step = scale_ok ? 4 : 0;
  const uint32_t scale_dst = kL.slot_scales + 4 * (lane & 15);
  const auto issue = [&](int s) {
    const uint32_t slot = ring + (s % kDepth) * kL.slot_bytes;
#pragma unroll
    for (int j = 0; j < 2; ++j)
      CpAsync16(slot + unit_dst[j], unit_src[j] + s * unit_step[j], unit_ok[j]);
    if (lane < 16) CpAsync4(slot + scale_dst, scale_src + s * scale_step, scale_ok);
    CpAsyncCommit();
  };

  const E2m1Bf16Tables tables = a.tables;
  const uint32_t c = static_cast<uint32_t>(lane & 3);
  const int g = lane >> 2;
  const auto prmt = [](uint32_t x, uint32_t y, uint32_t sel) { return PrmtB32(x, y, sel); };
  const uint32_t x_lane = static_cast<uint32_t>(Mxfp4Bf16DecodeXOffset(lane, 0, 0));
  float acc[kNi][4];
#pragma unroll
  for (int ni = 0; ni < kNi; ++ni) {
#pragma unroll
    for (int r = 0; r < 4; ++r) acc[ni][r] = 0.0f;
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
    uint32_t scale_word[2];
#pragma unroll
    for (int q = 0; q < 2; ++q) scale_word[q] = LoadRaw32(slot + kL.slot_scales + 4 * (g + 8 * q));
    // Every scale byte of the lane's stage multiplies in bf16.
    const bool plain = !bad && Mxfp4ScaleWordsMultiplyInBf16(scale_word[0], scale_word[1]);
    // f[16 (b / 2) + Mxfp4Bf16FragmentRegister(b % 2, j, q)]: the A
    // registers of the stage's K steps (step s': f[4 s' .. 4 s' + 3]).
    uint32_t f[32];
    const auto widen = [&](auto plain_scales) {
#pragma unroll
      for (int q = 0; q < 2; ++q) {
        const uint32_t row = slot + 64 * (g + 8 * q);
#pragma unroll
        for (int b = 0; b < 4; ++b) {
          uint32_t words[4];
          LoadRaw128(row + 16 * b, words);
          const uint32_t v = Mxfp4Bf16GatherQuadByte(words, c, prmt);
          uint32_t o[4];
          if constexpr (decltype(plain_scales)::value) {
            Mxfp4ToBf16EightBf16Mul(v, Mxfp4ScaleBf16x2(scale_word[q], b, prmt), tables, o);
          } else {
            const float sf = bad ? __uint_as_float(0x7FC00000u) : ScaleOf(scale_word[q], b);
            Mxfp4ToBf16Eight(v, sf, o);
          }
#pragma unroll
          for (int j = 0; j < 4; ++j)
            f[16 * (b >> 1) + Mxfp4Bf16FragmentRegister(b & 1, j, q)] = o[j];
        }
      }
    };
    if (plain) {
      widen(std::true_type{});
    } else {
      widen(std::false_type{});
    }
    const uint32_t x_stage =
        base + (chunk & 1) * kL.x_buffer + 2 * (s % kChunkStages) * kStageK + x_lane;
#pragma unroll
    for (int b = 0; b < 4; ++b) {
#pragma unroll
      for (int ni = 0; ni < kNi; ++ni) {
        if (ni < active_ni) {
          uint32_t r0, r1, r2, r3;
          LdMatrixX4(x_stage + ni * 8 * kPitch + 64 * b, r0, r1, r2, r3);
          const uint32_t lo[4] = {f[8 * b], f[8 * b + 1], f[8 * b + 2], f[8 * b + 3]};
          const uint32_t hi[4] = {f[8 * b + 4], f[8 * b + 5], f[8 * b + 6], f[8 * b + 7]};
          MmaBf16M16N8K16(acc[ni], lo, r0, r1);
          MmaBf16M16N8K16(acc[ni], hi, r2, r3);
        }
      }
    }
  }
  CpAsyncWait<0>();
  float d[4 * kNi];
#pragma unroll
  for (int ni = 0; ni < kNi; ++ni) {
#pragma unroll
    for (int r = 0; r < 4; ++r) d[4 * ni + r] = acc[ni][r];
  }
  StoreOutputs<kNi>(a, d, warp, lane, begin, m0, m, n0);
}

}  // namespace weir::kernels::cuda::moe::mxfp4_bf16

#endif  // WEIR_KERNELS_CUDA_MOE_MXFP4_BF16_DECODE_SM90_CUH_
