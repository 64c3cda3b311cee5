// kernels/cuda/dense/fp8_block_gemm_sm90.cuh — device code of Fp8BlockGemm.
// No host dependencies. The contract and the arithmetic are in
// fp8_block_gemm_sm90.h; the shared-memory layout in fp8_block_gemm_params.h.
//
// One CTA owns a block_n x block_m tile of Y^T (W rows x X rows) and walks all
// of K in stages of 128: cp.async (or, on the wgmma tiles of 64 and 128 X
// rows, TMA: Fp8GemmUsesTma) copies the W and X code tiles into a ring of
// `stages` shared buffers (the scale bytes by cp.async, or through registers
// one stage late when their rows are not 4-byte aligned), ldmatrix loads the
// mma fragments, and every 32 of K each warp widens them to f16 and sums the
// block on the tensor cores (BlockSum: two m16n8k16 f16 mma per 16 x 8
// sub-tile, from a zero accumulator), then folds the block sum into the fp32
// accumulators with the two scales.
#ifndef WEIR_KERNELS_CUDA_DENSE_FP8_BLOCK_GEMM_SM90_CUH_
#define WEIR_KERNELS_CUDA_DENSE_FP8_BLOCK_GEMM_SM90_CUH_

#include <cuda.h>
#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/cuda/dense/fp8_block_gemm_params.h"
#include "kernels/cuda/dense/fp8_mma_sm90.cuh"
#include "kernels/cuda/dense/split_reduce.cuh"
#include "kernels/cuda/grid_dependency.cuh"
#include "kernels/cuda/rounding.cuh"
#include "kernels/cuda/tma.cuh"

namespace weir::kernels::cuda::dense {
namespace fp8_gemm {

struct KernelArgs {
  const uint8_t* x;         // [m, k]
  const uint8_t* x_scales;  // [m, k / 32]
  const uint8_t* w;         // [n, k]
  const uint8_t* w_scales;  // [ceil(n / 32), k / 32]
  void* y;                  // [m, n], float or bf16
  int64_t m, n, k;
  bool bf16_out;
  bool round_f32;  // fp32 y rounded to bf16 (kF32RoundedBf16)
  // Per group (blockIdx.z / splits), resolved (non-zero when groups > 1).
  int64_t x_stride, xs_stride, w_stride, ws_stride, y_stride;
  // Split-K: blockIdx.z % splits is the split; with splits > 1 each split
  // writes its fp32 partial to partial [groups][splits][m][n] instead of y.
  int splits;
  float* partial;
  // Split-K without a second kernel: one zeroed counter per (group, M tile,
  // N tile) (the grid's x, y and group); the split CTA that counts last sums
  // the tile's partials in split order into y and zeroes the counter again.
  // Null: SplitReduceKernel (split_reduce.cuh) does the sum.
  uint32_t* counters;
  // Rows by group (Fp8BlockGemmParams::group_offsets): group g's X and Y rows
  // are [offsets[g], offsets[g + 1]) of the m rows (clamped); null: strides.
  const int64_t* offsets;
  // Fp8GemmUsesTma instances: the W and X code matrices as TMA tensor maps
  // ([groups][rows][k] bytes, boxes of kBn / kBm rows x 128 bytes, 128-byte
  // swizzle; X with one group when every group reads the same X).
  CUtensorMap w_map;
  CUtensorMap x_map;
  // Fp8BlockGemmParams::prefetch_weights without group offsets: the first
  // row tile's CTAs ask L2 for their W code rows before the wait.
  bool prefetch_w;
  // kN128M128Ws only: a CTA walks all of K and sums its tile's splits itself
  // (each from zero, then added in split order: SplitReduceKernel's bits);
  // grid.z is the groups alone and nothing goes through `partial`.
  bool fold_splits;
  // kN128M128Ws with offsets: the group count. Its grid is compact there:
  // blockIdx.y numbers every group's row tiles in group order (ceil(m / 128)
  // + groups covers them), so no CTA is launched for a group's empty tiles.
  int groups;
};

// Instances whose code tiles arrive by TMA (one thread issues a stage's two
// boxes; an mbarrier per ring slot counts their bytes) instead of cp.async
// from every thread: the wgmma prefill tiles with cp.async scales. The
// smem layout, the scales' path and the arithmetic are unchanged.
__host__ __device__ constexpr bool Fp8GemmUsesTma(int block_m, bool async_scales, bool wgmma) {
  return wgmma && async_scales && block_m >= 64;
}

// Writes element `at` of this group's y: bf16, fp32, or fp32 rounded to bf16.
__device__ __forceinline__ void StoreY(const KernelArgs& args, int64_t at, float v) {
  if (args.bf16_out) {
    static_cast<__nv_bfloat16*>(args.y)[at] = __float2bfloat16_rn(v);
  } else {
    static_cast<float*>(args.y)[at] = args.round_f32 ? RoundToBf16(v) : v;
  }
}

// The W code rows a CTA of the first row tile reads (its kBn rows, its
// split's K range, its group's weight), for GridDependencyPrologue to ask L2
// for before the wait: weights, which no kernel of a step writes. From the
// kernel's arguments and block index only. None without prefetch_w.
template <int kBn>
__device__ __forceinline__ L2Rows Fp8GemmWeightRows(const KernelArgs& a) {
  if (!a.prefetch_w || blockIdx.y != 0) return {};
  const int split = static_cast<int>(blockIdx.z % a.splits);
  const int64_t group = blockIdx.z / a.splits;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kBn;
  constexpr int kBlocksPerStage = kFp8GemmStageK / kFp8GemmScaleBlock;
  const int64_t num_kt = (a.k / kFp8GemmScaleBlock + kBlocksPerStage - 1) / kBlocksPerStage;
  const int64_t k0 = split * num_kt / a.splits * kFp8GemmStageK;
  const int64_t k1 = min((split + 1) * num_kt / a.splits * kFp8GemmStageK, a.k);
  if (k1 <= k0 || n0 >= a.n) return {};
  return {.base = a.w + group * a.w_stride + n0 * a.k + k0,
          .stride = a.k,
          .bytes = static_cast<unsigned>(k1 - k0),
          .rows = static_cast<int>(min(int64_t{kBn}, a.n - n0))};
}

// kBn x kBm tile of Y^T per CTA; warp tile (kBn / kWarpsN) x (kBm / kWarpsM).
// kAsyncScales (k % 128 == 0, scale pointers 4-byte aligned): a stage's 4
// scale bytes of each row are one aligned word, copied by cp.async with the
// tiles. Otherwise they go through registers, stored one stage late (slower:
// the loop then waits for them every stage). Both give the same bits.
//
// kWgmma (Fp8GemmMath::kWgmma): each K block of the stage is one wgmma
// m64nNk32 e4m3 over all N = kBm X rows, warpgroup wg reading W rows 64 wg ..
// 64 wg + 63 and the X rows straight from the swizzled ring by descriptor (no
// ldmatrix, no widening), Fp8GemmWgmmaDepth blocks in flight; the block sums
// are then folded as in the mma path. Needs
// warps of 16 W rows and all X rows in whole warpgroups
// (Fp8GemmTileRunsWgmma); the ring starts on a 1024-byte boundary (the
// launch adds kWgmmaSmemSlack bytes, the kernel moves its base up).
//
// kF16Wgmma (Fp8GemmMath::kWgmmaF16, kWgmma false): the mma path's operands
// and K slots on wgmma m64nNk16 f16: each warp's A fragment as the mma path
// widens it, X widened once a stage for the CTA into the f16 tile after the
// scratch (Fp8GemmF16XOffset); the mma path's fold. kMmaF16's bits.
template <int kBn, int kBm, int kWarpsN, int kWarpsM, int kStages, bool kAsyncScales,
          bool kWgmma = false, bool kF16Wgmma = false>
__global__ void __launch_bounds__(kWarpsN* kWarpsM * 32)
    Fp8BlockGemmKernel(const __grid_constant__ KernelArgs grouped) {
  GridDependencyPrologue(Fp8GemmWeightRows<kBn>(grouped));
  // This CTA's group: the same product over advanced pointers.
  KernelArgs args = grouped;
  const int split = static_cast<int>(blockIdx.z % grouped.splits);
  const int64_t group = blockIdx.z / grouped.splits;
  int64_t x_row_base = 0;  // the group's first row of x (the TMA box's row base)
  {
    const int64_t g = group;
    if (grouped.splits > 1) {
      args.partial = grouped.partial + (g * grouped.splits + split) * grouped.m * grouped.n;
    }
    args.w += g * grouped.w_stride;
    args.w_scales += g * grouped.ws_stride;
    if (grouped.offsets != nullptr) {  // this group's rows of x, x_scales and y
      const int64_t begin = min(max(grouped.offsets[g], int64_t{0}), grouped.m);
      const int64_t end = min(max(grouped.offsets[g + 1], int64_t{0}), grouped.m);
      args.m = max(end - begin, int64_t{0});
      x_row_base = begin;
      args.x += begin * grouped.k;
      args.x_scales += begin * (grouped.k / kFp8GemmScaleBlock);
      args.y = grouped.bf16_out
                   ? static_cast<void*>(static_cast<__nv_bfloat16*>(grouped.y) + begin * grouped.n)
                   : static_cast<void*>(static_cast<float*>(grouped.y) + begin * grouped.n);
      // Uniform over the CTA, before any barrier: a row tile past the group.
      if (static_cast<int64_t>(blockIdx.y) * kBm >= args.m) return;
    } else {
      args.x += g * grouped.x_stride;
      args.x_scales += g * grouped.xs_stride;
      args.y =
          grouped.bf16_out
              ? static_cast<void*>(static_cast<__nv_bfloat16*>(grouped.y) + g * grouped.y_stride)
              : static_cast<void*>(static_cast<float*>(grouped.y) + g * grouped.y_stride);
    }
  }
  constexpr int kThreads = kWarpsN * kWarpsM * 32;
  constexpr int kWarpN = kBn / kWarpsN;  // W rows per warp
  constexpr int kWarpM = kBm / kWarpsM;  // X rows per warp
  constexpr int kMi = kWarpN / 16;       // 16-row mma tiles of W per warp
  constexpr int kNi = kWarpM / 8;        // 8-row mma tiles of X per warp
  constexpr int kStageK = kFp8GemmStageK;
  constexpr int kBlocksPerStage = kStageK / kFp8GemmScaleBlock;  // 4
  constexpr int kGroups = (kBn + 31) / 32;                       // weight scale rows per CTA
  constexpr int kWTile = kBn * kStageK;
  constexpr int kXTile = kBm * kStageK;
  constexpr int kWScaleBytes = kGroups * kBlocksPerStage;
  constexpr int kXScaleBytes = kBm * kBlocksPerStage;
  constexpr int kScaleRows = kBm + kGroups;
  constexpr int kScaleLoads = (kScaleRows * kBlocksPerStage + kThreads - 1) / kThreads;
  constexpr int kAsyncScaleRows = (kScaleRows + kThreads - 1) / kThreads;
  constexpr int kWChunks = kBn * 8 / kThreads;  // 16-byte chunks per thread and stage
  constexpr int kXChunks = (kBm * 8 + kThreads - 1) / kThreads;  // 8 X rows: half the threads
  static_assert(kBn % 16 == 0 && kWarpN % 16 == 0 && kWarpM % 8 == 0, "tile shape");
  static_assert(kBn % 32 == 0 || kBn == 16, "a CTA covers whole weight scale rows, or half of one");
  static_assert(kBn * 8 % kThreads == 0 && (kBm * 8 % kThreads == 0 || kBm * 8 < kThreads),
                "chunk split");
  static_assert(kStages >= 3, "scales are stored one stage after their loads");
  static_assert(!(kWgmma || kF16Wgmma) || (kWarpsM == 1 && kWarpsN % 4 == 0 && kWarpN == 16),
                "wgmma: whole warpgroups of 16-row warps over every X row");
  static_assert(!(kWgmma && kF16Wgmma), "one math");

  constexpr bool kTma = Fp8GemmUsesTma(kBm, kAsyncScales, kWgmma || kF16Wgmma);
  // The mma tiles of at most 16 X rows (decode; kLean) take fewer
  // instructions a stage, with the same data in the same places: copy
  // sources held in registers, a whole stage copied without K tests, the
  // ldmatrix sources of every K block derived from block 0's, scales decoded
  // by a shift when normal, and with one 8-row X tile a warp
  // (kDirectXScales) each lane decodes the two X rows it folds in registers
  // instead of through the shared scratch. Measured on the H200 (README):
  // faster at 1 - 8 rows, slower on the 32- and 64-row tiles, which keep the
  // plain path.
  constexpr bool kLean = !kWgmma && !kF16Wgmma && !kTma && kBm <= 16;
  constexpr bool kDirectXScales = kLean && kNi == 1;
  // kTma: ring slot s's full barrier (one arrival with the expected bytes).
  __shared__ __align__(8) uint64_t full_bar[kTma ? kStages : 1];
  extern __shared__ __align__(128) uint8_t smem_raw[];
  // kWgmma: the base moved up to 1024 bytes (the launch adds the slack).
  uint8_t* const smem = (kWgmma || kF16Wgmma) ? AlignSharedTo1024(smem_raw) : smem_raw;
  uint8_t* const w_tiles = smem;                        // [kStages][kBn][128] swizzled
  uint8_t* const x_tiles = w_tiles + kStages * kWTile;  // [kStages][kBm][128] swizzled
  uint8_t* const w_sc = x_tiles + kStages * kXTile;     // [kStages][kGroups][4]
  uint8_t* const x_sc = w_sc + kStages * kWScaleBytes;  // [kStages][kBm][4]
  // Per warp: the current stage's X scales as fp32, [block][kWarpM rows].
  float* const x_sc_f = reinterpret_cast<float*>(
      smem + Fp8GemmScaleScratchOffset((x_sc + kStages * kXScaleBytes) - smem));
  // kF16Wgmma: the f16 X tile after the scratch (Fp8GemmSharedBytes' total).
  constexpr int64_t kF16X = Fp8GemmF16XOffset(
      Fp8GemmScaleScratchOffset(kStages * (kWTile + kXTile + kWScaleBytes + kXScaleBytes)) +
      int64_t{kWarpsN} * kWarpsM * kWarpM * kBlocksPerStage * 4);

  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int warp_n0 = (warp % kWarpsN) * kWarpN;  // first W row of the warp in the CTA tile
  const int warp_m0 = (warp / kWarpsN) * kWarpM;  // first X row of the warp in the CTA tile
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kBn;
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * kBm;
  const int64_t k = args.k;
  const int num_kb = static_cast<int>(k / kFp8GemmScaleBlock);
  const int num_kt = (num_kb + kBlocksPerStage - 1) / kBlocksPerStage;
  // This split's stages (all of them without a split).
  const int kt_begin = static_cast<int>(int64_t{split} * num_kt / args.splits);
  const int kt_end = static_cast<int>(int64_t{split + 1} * num_kt / args.splits);
  const int64_t n_groups = (args.n + 31) / 32;

  // Per-thread copy sources, fixed for the whole K loop.
  StageRowCopies<kWChunks, kThreads> w_rows(args.w, k, n0, args.n, tid);
  StageRowCopies<kXChunks, kThreads, kBm> x_rows(args.x, k, m0, args.m, tid);
  if constexpr (kLean) {
    w_rows.Keep();
    x_rows.Keep();
  }
  // Scale rows this thread copies when kAsyncScales: X rows first, then the
  // weight scale rows; their stage word sits at offset 4 kt of the row.
  const uint8_t* s_src[kAsyncScaleRows];
  uint32_t s_dst[kAsyncScaleRows];
  bool s_ok[kAsyncScaleRows];
#pragma unroll
  for (int i = 0; i < kAsyncScaleRows; ++i) {
    const int e = tid + i * kThreads;
    if (e < kBm) {
      s_ok[i] = m0 + e < args.m;
      s_src[i] = args.x_scales + (s_ok[i] ? (m0 + e) * num_kb : 0);
      s_dst[i] = SharedAddress(x_sc) + e * 4;
    } else {
      const int64_t g = n0 / 32 + (e - kBm);
      s_ok[i] = e < kScaleRows && g < n_groups;
      s_src[i] = args.w_scales + (s_ok[i] ? g * num_kb : 0);
      s_dst[i] = SharedAddress(w_sc) + (e - kBm) * 4;
    }
  }

  // Copies the W and X code tiles (and, when async, the scale words) of
  // stage `kt` into ring slot `slot`; rows past n / m and K past k are
  // zero-filled.
  auto load_tiles = [&](int kt, int slot) {
    const int64_t k_base = static_cast<int64_t>(kt) * kStageK;
    const int64_t k_left = k - k_base;
    if constexpr (kTma) {
      if (tid == 0) {
        const uint32_t bar = SharedAddress(&full_bar[slot]);
        MbarrierArriveExpectTx(bar, (kBn + kBm) * kStageK);
        TmaLoadRows(SharedAddress(w_tiles) + slot * kWTile, &grouped.w_map, bar,
                    static_cast<int>(k_base), static_cast<int>(n0), static_cast<int>(group));
        TmaLoadRows(SharedAddress(x_tiles) + slot * kXTile, &grouped.x_map, bar,
                    static_cast<int>(k_base), static_cast<int>(x_row_base + m0),
                    grouped.x_stride != 0 ? static_cast<int>(group) : 0);
      }
    } else {
      if (kLean && k_left >= kStageK) {
        w_rows.CopyWhole(SharedAddress(w_tiles) + slot * kWTile, k_base);
        x_rows.CopyWhole(SharedAddress(x_tiles) + slot * kXTile, k_base);
      } else {
        w_rows.Copy(SharedAddress(w_tiles) + slot * kWTile, k_base, k_left);
        x_rows.Copy(SharedAddress(x_tiles) + slot * kXTile, k_base, k_left);
      }
    }
    if constexpr (kAsyncScales) {  // unused rows read as code 0; their products are dropped
#pragma unroll
      for (int i = 0; i < kAsyncScaleRows; ++i) {
        if (i * kThreads + tid < kScaleRows) {
          const uint32_t dst =
              s_dst[i] + slot * (i * kThreads + tid < kBm ? kXScaleBytes : kWScaleBytes);
          CpAsync4(dst, s_ok[i] ? s_src[i] + kt * kBlocksPerStage : s_src[i], s_ok[i]);
        }
      }
    }
  };
  // Register path: this thread's scale bytes of stage `kt` (entry e = row * 4
  // + block, X rows first). Out-of-range entries read as 127 (1.0).
  auto load_scales = [&](int kt, uint32_t(&r)[kScaleLoads]) {
#pragma unroll
    for (int i = 0; i < kScaleLoads; ++i) {
      const int e = tid + i * kThreads;
      const int kb = kt * kBlocksPerStage + (e & 3);
      uint32_t v = 127;
      if (e < kXScaleBytes) {
        const int64_t gm = m0 + (e >> 2);
        if (gm < args.m && kb < num_kb) v = __ldg(args.x_scales + gm * num_kb + kb);
      } else if (e < kXScaleBytes + kWScaleBytes) {
        const int64_t g = n0 / 32 + ((e - kXScaleBytes) >> 2);
        if (g < n_groups && kb < num_kb) v = __ldg(args.w_scales + g * num_kb + kb);
      }
      r[i] = v;
    }
  };
  auto store_scales = [&](int slot, const uint32_t(&r)[kScaleLoads]) {
#pragma unroll
    for (int i = 0; i < kScaleLoads; ++i) {
      const int e = tid + i * kThreads;
      if (e < kXScaleBytes) {
        x_sc[slot * kXScaleBytes + e] = static_cast<uint8_t>(r[i]);
      } else if (e < kXScaleBytes + kWScaleBytes) {
        w_sc[slot * kWScaleBytes + e - kXScaleBytes] = static_cast<uint8_t>(r[i]);
      }
    }
  };

  float acc[kMi][kNi][4];
  ZeroAccumulators(acc);
  // The mma path's ldmatrix sources of K block 0 in a ring slot's W and X
  // tiles (block j's: Fp8GemmBlockSource), fixed for the whole K loop.
  uint32_t a_src[kMi];
#pragma unroll
  for (int mi = 0; mi < kMi; ++mi) {
    const Fp8GemmRowChunk s = Fp8GemmALdmatrixSource(lane, 0);
    a_src[mi] = Fp8GemmSwizzledOffset(warp_n0 + mi * 16 + s.row, s.chunk);
  }
  uint32_t b_src[(kNi + 1) / 2];
#pragma unroll
  for (int ni = 0; ni + 1 < kNi; ni += 2) {
    const Fp8GemmRowChunk s = Fp8GemmBLdmatrixSource(lane, 0);
    b_src[ni / 2] = Fp8GemmSwizzledOffset(warp_m0 + ni * 8 + s.row, s.chunk);
  }
  if constexpr (kNi % 2 == 1) {  // ldmatrix.x2: lanes 0..15 give the addresses
    const Fp8GemmRowChunk s = Fp8GemmBLdmatrixSource(lane & 15, 0);
    b_src[kNi / 2] = Fp8GemmSwizzledOffset(warp_m0 + (kNi - 1) * 8 + s.row, s.chunk);
  }

  // Folds the K blocks of ring slot `slot` (the first `blocks` of its 4) into acc.
  auto compute = [&](int slot, int blocks) {
    const uint32_t w_base = SharedAddress(w_tiles) + slot * kWTile;
    const uint32_t x_base = SharedAddress(x_tiles) + slot * kXTile;
    // The stage's X scales this warp reads, decoded to fp32 once into its
    // scratch ([block][row]), instead of once per K block in every lane and
    // mma tile. Weight scales stay words: byte j is K block j.
    const uint32_t x_scales_f = SharedAddress(x_sc_f) + warp * (kWarpM * kBlocksPerStage * 4);
    uint32_t w_word[kMi];
#pragma unroll
    for (int mi = 0; mi < kMi; ++mi) {  // 16-row tiles start at multiples of 16: one scale row
      w_word[mi] =
          LoadShared32(SharedAddress(w_sc) + slot * kWScaleBytes + (warp_n0 + mi * 16) / 32 * 4);
    }
    // One 8-row mma tile a warp (kDirectXScales): each lane decodes the two
    // X rows it folds (2t, 2t + 1) itself, in registers, instead.
    float xs_direct[2][kBlocksPerStage];
    if constexpr (kDirectXScales) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        ScalesOf(LoadShared32(SharedAddress(x_sc) + slot * kXScaleBytes +
                              (warp_m0 + Fp8GemmAccumulatorCoord(lane, h).m) * 4),
                 xs_direct[h]);
      }
    }
    // kWgmma: a warp's 16 W rows share one weight scale a block, so the
    // scratch holds sx * sw (exact: powers of two; the product the mma path
    // forms in PromoteBlock).
#pragma unroll
    for (int r = lane; r < (kDirectXScales ? 0 : kWarpM); r += 32) {
      const uint32_t word =
          LoadShared32(SharedAddress(x_sc) + slot * kXScaleBytes + (warp_m0 + r) * 4);
      if ((kWgmma || kF16Wgmma) && NormalScales(word) && NormalScales(w_word[0])) {
        // No 0x00 or 0xFF byte (the quantizer writes neither but for NaN
        // blocks): every scale is 2^(c - 127), bits c << 23, as ScaleOf
        // decodes it; the same products, fewer instructions.
#pragma unroll
        for (int j = 0; j < kBlocksPerStage; ++j) {
          StoreSharedF32(x_scales_f + (j * kWarpM + r) * 4,
                         __fmul_rn(NormalScaleOf(w_word[0], j), NormalScaleOf(word, j)));
        }
      } else {
#pragma unroll
        for (int j = 0; j < kBlocksPerStage; ++j) {
          const float sx = ScaleOf(word, j);
          StoreSharedF32(x_scales_f + (j * kWarpM + r) * 4,
                         kWgmma || kF16Wgmma ? __fmul_rn(ScaleOf(w_word[0], j), sx) : sx);
        }
      }
    }
    if constexpr (!kDirectXScales) __syncwarp();
    // kF16Wgmma: the stage's X rows widened to f16 once for the CTA (a unit
    // is 16 codes: their low pairs to chunk 2q, their high pairs to 2q + 1),
    // then published to wgmma's async proxy. Every warp waited for its
    // previous stage's wgmmas before the ring's barrier.
    if constexpr (kF16Wgmma) {
      const uint32_t x16 = SharedAddress(smem) + kF16X;
#pragma unroll
      for (int u0 = 0; u0 < kBm * 8; u0 += kThreads) {
        const int u = u0 + tid, row = u >> 3, q = u & 7;
        if (u < kBm * 8) {
          WidenCodesToF16Slots(x_base + Fp8GemmSwizzledOffset(row, q),
                               x16 + Fp8GemmF16XChunk(row, 2 * q, kBm),
                               x16 + Fp8GemmF16XChunk(row, 2 * q + 1, kBm));
        }
      }
      FenceSharedForAsyncProxy();
      __syncthreads();
    }
    // The wgmma maths' fold of block j's sums d: PromoteBlock's fma(p, sw *
    // sx, acc) with the exact product sw * sx from the scratch (decoded
    // above), so the mma path's bits for kF16Wgmma's sums.
    [[maybe_unused]] auto fold = [&](int j, float(&d)[kWarpM / 2]) {
#pragma unroll
      for (int r = 0; r < kWarpM / 2; ++r) PinRegister(d[r]);
#pragma unroll
      for (int ni = 0; ni < kNi; ++ni) {
        const float2 s = LoadSharedF32x2(
            x_scales_f + (j * kWarpM + ni * 8 + Fp8GemmAccumulatorCoord(lane, 0).m) * 4);
        acc[0][ni][0] = __fmaf_rn(d[4 * ni + 0], s.x, acc[0][ni][0]);
        acc[0][ni][1] = __fmaf_rn(d[4 * ni + 1], s.y, acc[0][ni][1]);
        acc[0][ni][2] = __fmaf_rn(d[4 * ni + 2], s.x, acc[0][ni][2]);
        acc[0][ni][3] = __fmaf_rn(d[4 * ni + 3], s.y, acc[0][ni][3]);
      }
    };
    if constexpr (kF16Wgmma) {
      // The f16 X tile's descriptor; block j's halves start (j / 2) column
      // atoms and (j % 2) 64 + 32 h bytes into it.
      const uint64_t x_desc = DescriptorOf(SwizzledKMajorDescriptorLo(SharedAddress(smem) + kF16X));
      constexpr int kP = kWarpM / 2;  // floats of one block sum a thread
      // The warp's 16 W rows of block j as the mma path's f16 A fragment.
      auto make_a = [&](int j, F16A& a) {
        uint32_t a8[4];
        const Fp8GemmRowChunk src = Fp8GemmALdmatrixSource(lane, j);
        LdMatrixX4(w_base + Fp8GemmSwizzledOffset(warp_n0 + src.row, src.chunk), a8[0], a8[1],
                   a8[2], a8[3]);
        a = WidenA(a8);
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          PinRegister(a.lo[q]);
          PinRegister(a.hi[q]);
        }
      };
      auto issue = [&](int j, const F16A& a, float(&d)[kP]) {
        const int at = (j >> 1) * kBm * 128 + (j & 1) * 64;
        WgmmaF16<kWarpM>::RSZero(a.lo, x_desc + static_cast<uint64_t>(at >> 4), d);
        WgmmaF16<kWarpM>::RS(a.hi, x_desc + static_cast<uint64_t>((at + 32) >> 4), d, true);
      };
      if (blocks == kBlocksPerStage) {
        WgmmaBlocksInFlight<Fp8GemmWgmmaDepth(kWarpM), kBlocksPerStage, kP, F16A>(
            make_a, issue, fold, [](F16A& a) {
#pragma unroll
              for (int q = 0; q < 4; ++q) {
                PinRegister(a.lo[q]);
                PinRegister(a.hi[q]);
              }
            });
      } else {
        for (int j = 0; j < blocks; ++j) {  // the last stage of a K that is not a multiple of 128
          F16A a;
          float p[kP];
          make_a(j, a);
          WgmmaFence();
          issue(j, a, p);
          WgmmaCommit();
          WgmmaWait(0);
          fold(j, p);
        }
      }
    } else if constexpr (kWgmma) {
      // The warpgroup's 64 W rows and the X tile, by descriptor; a K block
      // adds its byte offset / 16 to the address field. One wgmma of N =
      // kWarpM X rows a block. (With one warpgroup its index is the constant
      // 0, not the warp's.) The scratch holds sx * sw already (decoded
      // above): the product PromoteBlock would form, so the same bits.
      const int warpgroup = kWarpsN == 4 ? 0 : warp / 4;
      const uint32_t w_lo = SwizzledKMajorDescriptorLo(w_base + warpgroup * 64 * kStageK);
      const uint32_t x_lo = SwizzledKMajorDescriptorLo(x_base);
      constexpr int kP = kWarpM / 2;  // floats of one block sum a thread
      auto issue = [&](int j, float(&d)[kP]) {
        Wgmma<kWarpM>::SS(DescriptorOf(w_lo + ((j * 32) >> 4)),
                          DescriptorOf(x_lo + ((j * 32) >> 4)), d);
      };
      if (blocks == kBlocksPerStage) {
        // kDepth block sums in flight: block j + kDepth is issued as soon as
        // block j is folded, so the tensor cores run while the warps fold.
        constexpr int kDepth = Fp8GemmWgmmaDepth(kWarpM);
        float p[kDepth][kP];
        WgmmaFence();
#pragma unroll
        for (int j = 0; j < kDepth; ++j) {
          issue(j, p[j]);
          WgmmaCommit();
        }
#pragma unroll
        for (int j = 0; j < kBlocksPerStage; ++j) {
          const int issued = min(kBlocksPerStage, j + kDepth);
          WgmmaWait(issued - 1 - j);
          fold(j, p[j % kDepth]);
          if (j + kDepth < kBlocksPerStage) {
            WgmmaFence();
            issue(j + kDepth, p[j % kDepth]);
            WgmmaCommit();
          }
        }
      } else {
        for (int j = 0; j < blocks; ++j) {  // the last stage of a K that is not a multiple of 128
          float p[kP];
          WgmmaFence();
          issue(j, p);
          WgmmaCommit();
          WgmmaWait(0);
          fold(j, p);
        }
      }
    } else {
      [[maybe_unused]] float wf[kMi][kBlocksPerStage];
      if constexpr (kLean) {
#pragma unroll
        for (int mi = 0; mi < kMi; ++mi) ScalesOf(w_word[mi], wf[mi]);
      }
#pragma unroll
      for (int j = 0; j < kBlocksPerStage; ++j) {
        if (j >= blocks) break;  // uniform over the CTA: only in the last stage
        uint32_t raw[kNi][2];
        if constexpr (kLean) {
#pragma unroll
          for (int ni = 0; ni + 1 < kNi; ni += 2) {
            LdMatrixX4(x_base + Fp8GemmBlockSource(b_src[ni / 2], j), raw[ni][0], raw[ni][1],
                       raw[ni + 1][0], raw[ni + 1][1]);
          }
          if constexpr (kNi % 2 == 1) {
            LdMatrixX2(x_base + Fp8GemmBlockSource(b_src[kNi / 2], j), raw[kNi - 1][0],
                       raw[kNi - 1][1]);
          }
        } else {
          LoadXFragments<kNi>(x_base, warp_m0, lane, j, raw);
        }
        F16B b[kNi];
#pragma unroll
        for (int ni = 0; ni < kNi; ++ni) b[ni] = WidenB(raw[ni][0], raw[ni][1]);
        float xf[kNi][2];  // X scales of this thread's two output columns per tile
#pragma unroll
        for (int ni = 0; ni < kNi; ++ni) {
          if constexpr (kDirectXScales) {
            xf[ni][0] = xs_direct[0][j];
            xf[ni][1] = xs_direct[1][j];
          } else {
            const float2 f = LoadSharedF32x2(
                x_scales_f + (j * kWarpM + ni * 8 + Fp8GemmAccumulatorCoord(lane, 0).m) * 4);
            xf[ni][0] = f.x;  // row 2t
            xf[ni][1] = f.y;  // row 2t + 1
          }
        }
#pragma unroll
        for (int mi = 0; mi < kMi; ++mi) {
          uint32_t a8[4];
          if constexpr (kLean) {
            LdMatrixX4(w_base + Fp8GemmBlockSource(a_src[mi], j), a8[0], a8[1], a8[2], a8[3]);
          } else {
            const Fp8GemmRowChunk src = Fp8GemmALdmatrixSource(lane, j);
            LdMatrixX4(w_base + Fp8GemmSwizzledOffset(warp_n0 + mi * 16 + src.row, src.chunk),
                       a8[0], a8[1], a8[2], a8[3]);
          }
          const F16A a = WidenA(a8);
          float w;
          if constexpr (kLean) {
            w = wf[mi][j];
          } else {
            w = ScaleOf(w_word[mi], j);
          }
#pragma unroll
          for (int ni = 0; ni < kNi; ++ni) {
            float p[4];
            BlockSum(a, b[ni], p);
            // sx * sw is a product of powers of two: exact, so p * (sx * sw) is
            // too, and the fma rounds once, exactly like acc + p * sx * sw.
            PromoteBlock(acc[mi][ni], p, make_float2(w, w), make_float2(xf[ni][0], xf[ni][1]));
          }
        }
      }
    }
  };

  if constexpr (kTma) {
    if (tid == 0) {
#pragma unroll
      for (int s = 0; s < kStages; ++s) MbarrierInit(SharedAddress(&full_bar[s]), 1);
      FenceMbarrierInit();
    }
    __syncthreads();
  }
  // Prologue: stages 0 .. kStages - 2 (register-path scales stored at once).
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (kt_begin + s < kt_end) {
      load_tiles(kt_begin + s, s);
      if constexpr (!kAsyncScales) {
        uint32_t r[kScaleLoads];
        load_scales(kt_begin + s, r);
        store_scales(s, r);
      }
    }
    CpAsyncCommit();
  }
  uint32_t pending[kScaleLoads];
#pragma unroll
  for (int i = 0; i < kScaleLoads; ++i) pending[i] = 127;
  int slot = 0;
  int next_slot = kStages - 1;
  for (int kt = kt_begin; kt < kt_end; ++kt) {
    CpAsyncWait<kStages - 2>();  // this thread's copies of stage kt have landed
    if constexpr (kTma) {        // and the stage's boxes (the slot's (i / kStages)-th phase)
      MbarrierWait(SharedAddress(&full_bar[slot]), ((kt - kt_begin) / kStages) & 1);
    } else if constexpr (kWgmma) {
      FenceSharedForAsyncProxy();  // wgmma reads the cp.async data through the async proxy
    }
    __syncthreads();  // everyone's have; the slot of stage kt - 1 is free
    const int next = kt + kStages - 1;
    if constexpr (!kAsyncScales) {
      // Scales of stage next - 1 (loaded one iteration ago) go to their slot,
      // last read at stage kt - 2; they are read at stage next - 1 >= kt + 1,
      // after the next barrier.
      if (kt > kt_begin && next - 1 < kt_end) {
        store_scales(next_slot == 0 ? kStages - 1 : next_slot - 1, pending);
      }
    }
    if (next < kt_end) {
      load_tiles(next, next_slot);
      if constexpr (!kAsyncScales) load_scales(next, pending);
    }
    CpAsyncCommit();
    compute(slot, min(kBlocksPerStage, num_kb - kt * kBlocksPerStage));
    slot = slot + 1 == kStages ? 0 : slot + 1;
    next_slot = next_slot + 1 == kStages ? 0 : next_slot + 1;
  }

  ForEachOutput(acc, lane, n0 + warp_n0, m0 + warp_m0, args.n, args.m,
                [&](int64_t gm, int64_t gn, float v) {
                  if (args.splits > 1) {
                    args.partial[gm * args.n + gn] = v;
                  } else {
                    StoreY(args, gm * args.n + gn, v);
                  }
                });
  if (args.splits > 1 && args.counters != nullptr) {
    // Publish this split's partial, then count it; the last split of the
    // tile reads every split's partial (from L2: other CTAs wrote them) and
    // sums them in split order, as SplitReduceKernel would.
    __shared__ int s_last;
    uint32_t* counter = args.counters + (group * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
    __threadfence();
    __syncthreads();
    if (tid == 0) s_last = atomicAdd(counter, 1u) == static_cast<uint32_t>(args.splits - 1);
    __syncthreads();
    if (s_last) {
      __threadfence();
      const float* part0 = grouped.partial + group * grouped.splits * grouped.m * grouped.n;
      const int64_t mn = args.m * args.n;
      for (int e = tid; e < kBn * kBm; e += kThreads) {
        const int64_t gm = m0 + e / kBn, gn = n0 + e % kBn;
        if (gm >= args.m || gn >= args.n) continue;
        const int64_t at = gm * args.n + gn;
        float v = __ldcg(part0 + at);
        for (int sp = 1; sp < args.splits; ++sp) v = __fadd_rn(v, __ldcg(part0 + sp * mn + at));
        StoreY(args, at, v);
      }
      if (tid == 0) *counter = 0u;
    }
  }
}

}  // namespace fp8_gemm
}  // namespace weir::kernels::cuda::dense

#endif  // WEIR_KERNELS_CUDA_DENSE_FP8_BLOCK_GEMM_SM90_CUH_
