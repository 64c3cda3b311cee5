// kernels/cuda/dense/bf16_gemm_ws_sm90.cuh — Bf16Gemm's warp-specialized
// prefill tile (Fp8GemmTile::kN128M128Ws, as Fp8BlockGemm names it). Device
// code only; included by bf16_gemm_sm90.cu. The arithmetic is Bf16Gemm's
// (bf16_gemm_sm90.h: per element, acc += the tensor core's sum of 16
// products, K ascending), issued as wgmma m64n128k16 bf16 with both operands
// read by descriptor from the TMA-filled ring, so no operand passes through
// registers and nothing needs widening:
//
//  * warp 0 (the loader) walks the CTA's K stages of 64 elements: it waits
//    for a free slot (`empty`), and lane 0 issues the stage's W and X boxes
//    (128 rows x 128 bytes each, 128-byte swizzle) counted on the slot's
//    `full` mbarrier; warps 1 - 3 have nothing to do and leave;
//  * warpgroups 1 and 2 own W rows 64 c .. 64 c + 63 of the CTA's 128 and all
//    128 X rows: for each stage, its K steps as wgmma into the same fp32
//    accumulators (issued back to back, one commit a stage), and once the
//    previous stage's group has retired its slot is freed.
// Rows and K past the operands are zero-filled by TMA.
//
// Two forms, the same bits (README "The bf16 tile over 256 X rows", "The
// bf16 tile persistent"): kWide (Bf16GemmParams::ws_m256) takes 256 X rows a
// CTA with wgmma m64n256k16 and a 4-slot ring, the loader's warpgroup giving
// its registers to the consumers; WsArgs::persistent (ws_persistent) runs at
// most one CTA an SM over the tiles in turn, the ring's stages and phases
// counted across them (slot and phase counters), each tile's last slot freed after its final
// wait so the loader fetches the next tile while the consumers store.
#ifndef WEIR_KERNELS_CUDA_DENSE_BF16_GEMM_WS_SM90_CUH_
#define WEIR_KERNELS_CUDA_DENSE_BF16_GEMM_WS_SM90_CUH_

#include <cuda.h>
#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/cuda/dense/bf16_gemm_sm90.cuh"
#include "kernels/cuda/dense/fp8_block_gemm_params.h"
#include "kernels/cuda/dense/fp8_mma_sm90.cuh"
#include "kernels/cuda/dense/wgmma_bf16.cuh"
#include "kernels/cuda/grid_dependency.cuh"
#include "kernels/cuda/rounding.cuh"
#include "kernels/cuda/tma.cuh"

namespace weir::kernels::cuda::dense {
namespace bf16_gemm {

inline constexpr int kWsBn = 128;
inline constexpr int kWsThreads = 384;
inline constexpr int kWsTile = 128 * 128;  // W's bytes of a stage (128 rows x 64 K)

// The tile's X rows and ring: 128 rows in 6 slots of 32 KB, or
// (Bf16GemmParams::ws_m256) 256 rows in 4 slots of 48 KB, each consumer
// warpgroup a wgmma m64n256k16 over all of them with 128 accumulators.
template <bool kWide>
struct WsShape {
  static constexpr int kBm = kWide ? 256 : 128;
  static constexpr int kStages = kWide ? 4 : 6;
  static constexpr int kXTile = kBm * 128;
  static constexpr int kSlot = kWsTile + kXTile;
  static constexpr int kSharedBytes = kStages * kSlot;
  static constexpr int kAcc = kBm / 2;  // accumulators a consumer thread
  static_assert(kSlot % 1024 == 0 && kSharedBytes <= 200 * 1024, "swizzled slots, one CTA an SM");
};
// The wide form's register split: the loader's warpgroup keeps 40, the
// consumers take 232 (d's 128 floats and the addressing).
inline constexpr int kWsWideProducerRegs = 40;
inline constexpr int kWsWideConsumerRegs = 232;
static_assert(kWsThreads / 3 * (kWsWideProducerRegs + 2 * kWsWideConsumerRegs) <= 65536,
              "register file");

struct WsArgs {
  KernelArgs plain;   // pointers (y only), shape, strides, output form, split
  CUtensorMap w_map;  // [groups][n][2 k] bytes, boxes of 128 rows x 128 bytes
  CUtensorMap x_map;  // [groups][m][2 k] bytes
  // The CTA walks all of K and sums its tile's splits itself (each from
  // zero, then added in split order: SplitReduceKernel's bits); grid.z is
  // the groups alone and nothing goes through `partial`.
  bool fold_splits;
  // Bf16GemmParams::ws_persistent (with fold_splits or no split): a grid of
  // at most one CTA an SM, each taking tiles in turn.
  bool persistent;
  int groups;
};

// kFold: the CTA folds more than one split of K (fold_splits with k_splits
// > 1) and keeps the splits' running sums beside the accumulators; without
// it there is no such array (at 256 rows it spilled: 128 sums beside 128
// accumulators, a stack the K loop touched every stage).
template <bool kWide, bool kFold>
__global__ void __launch_bounds__(kWsThreads, 1)
    Bf16GemmWsKernel(const __grid_constant__ WsArgs ws) {
  GridDependencyPrologue();
  using Shape = WsShape<kWide>;
  constexpr int kStages = Shape::kStages, kSlot = Shape::kSlot, kAcc = Shape::kAcc;
  using fp8_gemm::AlignSharedTo1024;
  using fp8_gemm::DescriptorOf;
  using fp8_gemm::ForEachOutput;
  using fp8_gemm::PinRegister;
  using fp8_gemm::SharedAddress;
  using fp8_gemm::SwizzledKMajorDescriptorLo;
  using fp8_gemm::WgmmaCommit;
  using fp8_gemm::WgmmaFence;
  using fp8_gemm::WgmmaWait;
  const KernelArgs& args = ws.plain;
  const int z_splits = ws.fold_splits ? 1 : args.k_splits;
  const int num_kt = static_cast<int>((args.k + kBf16GemmStageK - 1) / kBf16GemmStageK);
  // The CTA's tiles: its block's one, or (persistent) every gridDim.x-th of
  // (m tile fastest, n tile, group) from blockIdx.x.
  const int64_t m_tiles = (args.m + Shape::kBm - 1) / Shape::kBm;
  const int64_t n_tiles = (args.n + kWsBn - 1) / kWsBn;
  const int64_t tiles = ws.persistent ? m_tiles * n_tiles * ws.groups : 1;
  const int64_t first_tile = ws.persistent ? static_cast<int64_t>(blockIdx.x) : 0;
  const int64_t tile_step = ws.persistent ? static_cast<int64_t>(gridDim.x) : 1;
  struct Tile {
    int64_t n0, m0;
    int group, split, kt_begin, stages;
  };
  auto tile_at = [&](int64_t t) {
    Tile tile;
    if (ws.persistent) {  // fold_splits: the CTA walks all of K
      tile.m0 = (t % m_tiles) * Shape::kBm;
      tile.n0 = (t / m_tiles % n_tiles) * kWsBn;
      tile.group = static_cast<int>(t / m_tiles / n_tiles);
      tile.split = 0;
    } else {
      tile.n0 = static_cast<int64_t>(blockIdx.x) * kWsBn;
      tile.m0 = static_cast<int64_t>(blockIdx.y) * Shape::kBm;
      tile.group = static_cast<int>(blockIdx.z / z_splits);
      tile.split = static_cast<int>(blockIdx.z % z_splits);
    }
    tile.kt_begin = static_cast<int>(int64_t{tile.split} * num_kt / z_splits);
    tile.stages = static_cast<int>(int64_t{tile.split + 1} * num_kt / z_splits) - tile.kt_begin;
    return tile;
  };

  __shared__ __align__(8) uint64_t bars[2 * kStages];
  extern __shared__ __align__(128) uint8_t smem_raw[];
  const uint32_t base = SharedAddress(AlignSharedTo1024(smem_raw));
  const uint32_t full0 = SharedAddress(&bars[0]);
  const uint32_t empty0 = full0 + 8 * kStages;
  const int tid = static_cast<int>(threadIdx.x);
  const int warp = tid >> 5;
  if (tid == 0) {
    for (int s = 0; s < kStages; ++s) {
      MbarrierInit(full0 + 8 * s, 1);
      MbarrierInit(empty0 + 8 * s, 2 * 128);
    }
    FenceMbarrierInit();
  }
  __syncthreads();

  // The ring's stages are counted across the CTA's tiles, so a slot's phase
  // continues from one tile to the next: the loader runs into the next
  // tile's stages while the consumers store the last one. Each side keeps
  // its stage's slot and phase as counters (stage it: slot it % kStages,
  // phase (it / kStages) & 1): a 64-bit division by a ring of 6 cost the
  // K loop more integer instructions than wgmmas (ncu, thirty-eighth
  // session).
  if (warp < 4) {
    if constexpr (kWide) {
      asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kWsWideProducerRegs));
    }
    if (tid == 0) {
      int slot = 0, phase = 0;
      bool lapped = false;  // past the ring's first lap: a slot is free once the consumers say
      for (int64_t t = first_tile; t < tiles; t += tile_step) {
        const Tile tile = tile_at(t);
        for (int i = 0; i < tile.stages; ++i) {
          if (lapped) MbarrierWait(empty0 + 8 * slot, phase ^ 1);
          const uint32_t full = full0 + 8 * slot;
          MbarrierArriveExpectTx(full, kSlot);
          const int k_byte = (tile.kt_begin + i) * kBf16GemmStageK * 2;
          TmaLoadRows(base + slot * kSlot, &ws.w_map, full, k_byte, static_cast<int>(tile.n0),
                      tile.group);
          TmaLoadRows(base + slot * kSlot + kWsTile, &ws.x_map, full, k_byte,
                      static_cast<int>(tile.m0), tile.group);
          if (++slot == kStages) {
            slot = 0;
            phase ^= 1;
            lapped = true;
          }
        }
      }
    }
    return;
  }
  if constexpr (kWide) {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kWsWideConsumerRegs));
  }

  const int wg = (warp - 4) / 4;  // 0 or 1: W rows 64 wg .. 64 wg + 63
  const int lane = tid & 31;
  // fold_splits: the splits' sums so far, and the first stage of the next split.
  const int folds = kFold ? args.k_splits : 1;
  int slot = 0, phase = 0, last_slot = 0;  // the stage's slot and phase; the one before's slot
  for (int64_t t = first_tile; t < tiles; t += tile_step) {
    const Tile tile = tile_at(t);
    const int64_t n0 = tile.n0, m0 = tile.m0;
    const int stages = tile.stages;
    float d[kAcc];
#pragma unroll
    for (int r = 0; r < kAcc; ++r) d[r] = 0.0f;
    float total[kFold ? kAcc : 1];
    int next_split = 1;
    int boundary = folds > 1 ? num_kt / folds : stages;
    for (int i = 0; i < stages; ++i) {
      if (kFold && i == boundary) {  // split next_split starts: its sum begins at +0
        WgmmaWait(0);
        if constexpr (kFold) {
#pragma unroll
          for (int r = 0; r < kAcc; ++r) {
            PinRegister(d[r]);
            total[r] = next_split == 1 ? d[r] : __fadd_rn(total[r], d[r]);
            d[r] = 0.0f;
          }
        }
        ++next_split;
        boundary =
            next_split < folds ? static_cast<int>(int64_t{next_split} * num_kt / folds) : stages;
      }
      MbarrierWait(full0 + 8 * slot, phase);
      const uint32_t w_lo = SwizzledKMajorDescriptorLo(base + slot * kSlot + wg * 64 * 128);
      const uint32_t x_lo = SwizzledKMajorDescriptorLo(base + slot * kSlot + kWsTile);
      // All 4 K steps of every stage, also past k in the last one (a stage of
      // a k % 64 != 0): TMA zero-fills both operands there, and the tensor
      // core's sum of acc and 16 products of +0 is acc (acc is never -0: it
      // starts at +0, and a sum is -0 only when every term is). A step count
      // that varies would make ptxas serialize every wgmma (C7520).
      WgmmaFence();
#pragma unroll
      for (int s = 0; s < 4; ++s) {
        const uint64_t a = DescriptorOf(w_lo + ((32 * s) >> 4));
        const uint64_t b = DescriptorOf(x_lo + ((32 * s) >> 4));
        if constexpr (kWide) {
          WgmmaBf16N256(a, b, d);
        } else {
          WgmmaBf16N128(a, b, d);
        }
      }
      WgmmaCommit();
      // The previous stage's group has retired once at most this one is in
      // flight: its slot is free.
      WgmmaWait(1);
      if (i > 0) MbarrierArrive(empty0 + 8 * last_slot);
      last_slot = slot;
      if (++slot == kStages) {
        slot = 0;
        phase ^= 1;
      }
    }
    WgmmaWait(0);
    // The tile's last slot (the next tile's loads may take it).
    if (stages > 0) MbarrierArrive(empty0 + 8 * last_slot);
#pragma unroll
    for (int r = 0; r < kAcc; ++r) {
      PinRegister(d[r]);
      if constexpr (kFold) {
        if (folds > 1) d[r] = __fadd_rn(total[r], d[r]);
      }
    }

    // d[4 i + r] is element Fp8GemmAccumulatorCoord(lane, r) of X rows
    // 8 i .. 8 i + 7 (Wgmma's layout): ForEachOutput's [1][kAcc / 4][4].
    float acc[1][kAcc / 4][4];
#pragma unroll
    for (int i = 0; i < kAcc / 4; ++i) {
#pragma unroll
      for (int r = 0; r < 4; ++r) acc[0][i][r] = d[4 * i + r];
    }
    const int64_t g = tile.group;
    if (z_splits > 1) {
      float* part = args.partial + (g * args.k_splits + tile.split) * args.m * args.n;
      ForEachOutput(acc, lane, n0 + (warp - 4) * 16, m0, args.n, args.m,
                    [&](int64_t gm, int64_t gn, float v) { part[gm * args.n + gn] = v; });
      continue;
    }
    // With row_role, the rows of the other role keep what y held (also for
    // the splits summed above); a mask for each 128 rows.
    const uint32_t rows = RowsOfRole<16>(args.row_role, args.role, m0, args.m, lane);
    const uint32_t rows_hi =
        kWide ? RowsOfRole<16>(args.row_role, args.role, m0 + 128, args.m, lane) : 0u;
    ForEachOutput(acc, lane, n0 + (warp - 4) * 16, m0, args.n, args.m,
                  [&](int64_t gm, int64_t gn, float v) {
                    const int64_t dm = gm - m0;
                    if (!RowHasRole(dm < 128 ? rows : rows_hi, dm & 127)) return;
                    const int64_t at = g * args.y_stride + gm * args.ldy + gn;
                    if (args.bf16_out) {
                      static_cast<__nv_bfloat16*>(args.y)[at] = __float2bfloat16_rn(v);
                    } else {
                      static_cast<float*>(args.y)[at] = args.round_f32 ? RoundToBf16(v) : v;
                    }
                  });
  }
}

}  // namespace bf16_gemm
}  // namespace weir::kernels::cuda::dense

#endif  // WEIR_KERNELS_CUDA_DENSE_BF16_GEMM_WS_SM90_CUH_
