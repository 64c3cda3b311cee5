// kernels/cuda/dense/fp8_block_gemm_ws_sm90.cuh — Fp8BlockGemm's
// warp-specialized prefill tile (Fp8GemmTile::kN128M128Ws). Device code only;
// included by fp8_block_gemm_sm90.cu. The arithmetic is kMmaF16's (the
// contract in fp8_block_gemm_sm90.h), so a row gets the bits of every other
// tile (the kE4m3 instance, further down, runs kWgmma's and gets that math's
// bits); what changes is who does what:
//
//  * warpgroup 0, the producer (registers lowered to kWsProducerRegs):
//    - warp 0 walks the CTA's K stages ahead of the others: it waits for a
//      code slot to be free, has lane 0 issue the stage's W and X code boxes
//      by TMA, and the lanes copy the stage's scale words by cp.async, all
//      counted on the slot's `full` mbarrier (lane 0's expect_tx arrival and
//      one cp.async arrival a lane);
//    - warps 1 - 3 (the wideners) take each landed stage, widen its X codes
//      to f16 once for the CTA into the stage's f16 slot (WidenB's K slots,
//      the layout kWgmmaF16 reads by descriptor), and write the table of
//      exact scale products sw x sx the fold needs ([block][W scale row]
//      [lane quad][X rows of the quad], padded so a warp's 16-byte reads hit
//      distinct banks); then they publish the f16 slot (`x16_full`) and free
//      the code slot's X half (`empty`).
//  * warpgroups 1 and 2, the consumers (kWsConsumerRegs): warpgroup c owns W
//    rows 64 c .. 64 c + 63 of the CTA's 128 and all 128 X rows. Each 32 of
//    K is two wgmma m64n128k16 f16 (A: the warp's 16 W rows widened in
//    registers as the mma A fragment, B: the f16 X slot), then the fold
//    acc = fma(p, sw sx, acc) with the product from the table: PromoteBlock's
//    arithmetic on the mma pair's sums (tensor_core_sum_probe_test), so
//    kMmaF16's bits. The next block's A fragment is made while the current
//    block runs on the tensor cores, and the two consumer warpgroups fold in
//    each other's shadow.
//
// Rings: WsLayout::kCodeStages code slots (W and X codes and scale words of
// one stage of 128 K), WsLayout::kX16Stages f16 slots (the widened X and the
// scale table). mbarriers: full / empty per code slot, x16_full / x16_empty
// per f16 slot; a slot's use i completes phase i, so its waiter tests parity
// (i / slots) & 1.
//
// With an f16 panel of X (kPanel, Fp8BlockGemmParams::x_f16: the codes
// widened once for the whole product, in the f16 slots' K order) the code
// slots hold W alone and the loader also brings each stage's X by TMA
// straight into its f16 slot (two 64 x 128 boxes, counted on x16_full with
// the wideners' arrivals); the wideners then only write the scale table. The
// f16 slot's bytes are the same, so are the bits, and the 48 KB a stage of
// shared-memory traffic the widening cost (16 KB read, 32 KB written) go; three
// f16 slots fit where the X codes were.
#ifndef WEIR_KERNELS_CUDA_DENSE_FP8_BLOCK_GEMM_WS_SM90_CUH_
#define WEIR_KERNELS_CUDA_DENSE_FP8_BLOCK_GEMM_WS_SM90_CUH_

#include <cuda.h>
#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/cuda/cp_async.cuh"
#include "kernels/cuda/dense/fp8_block_gemm_params.h"
#include "kernels/cuda/dense/fp8_block_gemm_sm90.cuh"
#include "kernels/cuda/dense/fp8_mma_sm90.cuh"
#include "kernels/cuda/grid_dependency.cuh"
#include "kernels/cuda/tma.cuh"

namespace weir::kernels::cuda::dense {
namespace fp8_gemm {

inline constexpr int kWsBn = 128;  // W rows a CTA (two consumer warpgroups of 64)
inline constexpr int kWsBm = 128;  // X rows a CTA (the wgmma N)
inline constexpr int kWsThreads = 384;
inline constexpr int kWsCodeStages = 4;
inline constexpr int kWsProducerRegs = 56;
inline constexpr int kWsConsumerRegs = 224;
static_assert(kWsThreads / 3 * (kWsProducerRegs + 2 * kWsConsumerRegs) <= 65536, "register file");
// kE4m3: the consumers hold 64 accumulators and two blocks' sums (192
// floats) and need no A fragment; its producers only load and table.
inline constexpr int kWsE4m3ProducerRegs = 40;
inline constexpr int kWsE4m3ConsumerRegs = 232;
static_assert(kWsThreads / 3 * (kWsE4m3ProducerRegs + 2 * kWsE4m3ConsumerRegs) <= 65536,
              "register file");

// Shared layout (bytes from the 1024-aligned base).
inline constexpr int kWsCodeTile = kWsBn * kFp8GemmStageK;  // one operand's codes of a stage
inline constexpr int kWsX16Slot = kWsBm * 256;              // Fp8GemmF16XBytes(128)
// The fold's table of a stage (Fp8GemmWsTableIndex).
inline constexpr int kWsTableSlot = kFp8GemmWsTableFloats * 4;
inline constexpr int kWsScaleSlot = (kWsBm + kWsBn / 32) * 4;  // X words, then W words
// kE4m3's table of a stage: Fp8GemmWsE4m3TableIndex (fp8_block_gemm_params.h).
static_assert(Fp8GemmWsE4m3TableIndex(3, kWsBm - 1, 3) < kFp8GemmWsTableFloats, "table slot");
// kScaled adds a 16-byte slot of votes an f16 slot (the wideners' warps:
// every row of the stage in range, Fp8BlockGemmParams::x_f16_scaled), and
// trades a code slot for a fourth f16 slot (X arrives later than W: its slot
// frees a stage after the code slot's).
//
// kE4m3 (Fp8GemmMath::kWgmma) reads both operands' codes by descriptor: no f16
// slots, a table slot beside each of five code slots (the table of stage i
// lives in table slot i % kCodeStages, so the code slot's `empty` frees both).
template <bool kPanel, bool kScaled = false, bool kE4m3 = false>
struct WsLayout {
  static constexpr int kCodeStages =
      kE4m3 ? kWsCodeStages + 1 : (kScaled ? kWsCodeStages - 1 : kWsCodeStages);
  static constexpr int kCodeSlot = kPanel ? kWsCodeTile : 2 * kWsCodeTile;  // W (then X)
  // f16 slots (kE4m3: table slots only, one a code slot).
  static constexpr int kX16Stages = kE4m3 ? kCodeStages : (kPanel ? (kScaled ? 4 : 3) : 2);
  static constexpr int kX16SlotBytes = kE4m3 ? 0 : kWsX16Slot;
  static constexpr int kX16Offset = kCodeStages * kCodeSlot;
  static constexpr int kTableOffset = kX16Offset + kX16Stages * kX16SlotBytes;
  static constexpr int kVoteOffset = kTableOffset + kX16Stages * kWsTableSlot;
  static constexpr int kScaleOffset = kVoteOffset + (kScaled ? kX16Stages * 16 : 0);
  static constexpr int kSharedBytes = kScaleOffset + kCodeStages * kWsScaleSlot;
  static_assert(kX16Offset % 1024 == 0 && kWsX16Slot % 1024 == 0, "swizzled f16 slots");
  static_assert(!kE4m3 || (!kPanel && !kScaled), "kE4m3 reads the codes");
  static_assert(kSharedBytes + kWgmmaSmemSlack <= 227 * 1024, "an SM's shared memory");
};

template <int kRegs>
__device__ __forceinline__ void LowerRegisters() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}
template <int kRegs>
__device__ __forceinline__ void RaiseRegisters() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}

// With folded splits blockIdx.z is the group alone, which the L2 hint's row
// arithmetic (group x splits) does not describe: no hint then.
//
// kHalves (Fp8BlockGemmParams::ws_halves): each consumer issues a block's
// sums as two groups of 64 X rows (wgmma m64n64k16 f16, twice) and keeps one
// group in flight while it folds the other: the items (stage, block, half)
// run in order, item u + 1 is issued before item u is folded, so the tensor
// cores work during every fold instead of waiting for it. Each sum is the
// same wgmma arithmetic over the same K order (only the N extent of an
// instruction changes), so the bits are kMmaF16's as before.
//
// kScaled (Fp8BlockGemmParams::x_f16_scaled, with kPanel, without kHalves):
// the panel holds each in-range block as code x 2^(e + 6). The wideners
// write sw 2^-6 into the table for such rows (sw sx where that product
// overflows, and for the rows out of range), and each widener warp votes
// whether every row of the stage it read is in range and every W scale
// folds (Fp8PanelWeightScaleFolds). A stage all three voted for is folded
// with one factor a warp and block, sw 2^-6, and no table load. Either way
// fma(p 2^(e + 6), sw 2^-6, acc) is fma(p, sw sx, acc) exactly: the block
// sum of X rows scaled by a power of two is the unscaled sum scaled (the
// products are exact and the tensor cores align to the largest), and both
// fmas round the same exact value once.
//
// kE4m3 (Fp8GemmMath::kWgmma, without kPanel, kHalves and kScaled): each
// block is one wgmma m64n128k32 e4m3 with both operands' codes by descriptor
// (no widening; the wideners only write the table), two blocks in flight a
// warpgroup: block j + 2 is issued as soon as block j is folded, so a
// warpgroup's own folds run beside its wgmma. The block sums and the fold
// are kN128M128Wg's (the table holds the products its scratch holds), so a
// row gets kWgmma's bits on every tile.
template <bool kPanel, bool kHalves = false, bool kScaled = false, bool kE4m3 = false>
__global__ void __launch_bounds__(kWsThreads, 1)
    Fp8BlockGemmWsKernel(const __grid_constant__ KernelArgs grouped) {
  GridDependencyPrologue(grouped.fold_splits ? L2Rows{} : Fp8GemmWeightRows<kWsBn>(grouped));
  static_assert(!kScaled || (kPanel && !kHalves), "the scaled panel: with a panel, without halves");
  static_assert(!kE4m3 || (!kPanel && !kHalves && !kScaled), "e4m3: the codes, whole blocks");
  using Layout = WsLayout<kPanel, kScaled, kE4m3>;
  constexpr int kCodeStages = Layout::kCodeStages;
  constexpr int kWsCodeSlot = Layout::kCodeSlot;
  constexpr int kWsX16Stages = Layout::kX16Stages;
  constexpr int kWsX16Offset = Layout::kX16Offset;
  constexpr int kWsTableOffset = Layout::kTableOffset;
  constexpr int kWsScaleOffset = Layout::kScaleOffset;
  constexpr int kWsVoteOffset = Layout::kVoteOffset;
  constexpr float kUnshift = 1.0f / (1 << kFp8PanelScaleShift);  // 2^-6
  KernelArgs args = grouped;
  // fold_splits: one CTA walks every split of its tile (blockIdx.z = group).
  const int z_splits = grouped.fold_splits ? 1 : grouped.splits;
  const int split = static_cast<int>(blockIdx.z % z_splits);
  int64_t group = blockIdx.z / z_splits;
  int64_t row_tile = blockIdx.y;
  if (grouped.offsets != nullptr) {
    // The compact grid (KernelArgs::groups): item blockIdx.y of the row tiles
    // of groups 0, 1, ... in order; past the last one, nothing to do.
    int64_t t = blockIdx.y;
    group = -1;
    for (int g = 0; g < grouped.groups; ++g) {
      const int64_t b = min(max(grouped.offsets[g], int64_t{0}), grouped.m);
      const int64_t e = min(max(grouped.offsets[g + 1], int64_t{0}), grouped.m);
      const int64_t tiles = (max(e - b, int64_t{0}) + kWsBm - 1) / kWsBm;
      if (t < tiles) {
        group = g;
        row_tile = t;
        break;
      }
      t -= tiles;
    }
    if (group < 0) return;  // uniform over the CTA, before any barrier
  }
  int64_t x_row_base = 0;
  if (z_splits > 1) {
    args.partial = grouped.partial + (group * grouped.splits + split) * grouped.m * grouped.n;
  }
  args.w_scales += group * grouped.ws_stride;
  if (grouped.offsets != nullptr) {
    const int64_t begin = min(max(grouped.offsets[group], int64_t{0}), grouped.m);
    const int64_t end = min(max(grouped.offsets[group + 1], int64_t{0}), grouped.m);
    args.m = max(end - begin, int64_t{0});
    x_row_base = begin;
    args.x_scales += begin * (grouped.k / kFp8GemmScaleBlock);
    args.y = grouped.bf16_out
                 ? static_cast<void*>(static_cast<__nv_bfloat16*>(grouped.y) + begin * grouped.n)
                 : static_cast<void*>(static_cast<float*>(grouped.y) + begin * grouped.n);
  } else {
    args.x_scales += group * grouped.xs_stride;
    args.y =
        grouped.bf16_out
            ? static_cast<void*>(static_cast<__nv_bfloat16*>(grouped.y) + group * grouped.y_stride)
            : static_cast<void*>(static_cast<float*>(grouped.y) + group * grouped.y_stride);
  }

  constexpr int kBlocks = kFp8GemmStageK / kFp8GemmScaleBlock;  // 4 K blocks a stage
  __shared__ __align__(8) uint64_t bars[2 * kCodeStages + 2 * kWsX16Stages];
  extern __shared__ __align__(128) uint8_t smem_raw[];
  uint8_t* const smem = AlignSharedTo1024(smem_raw);
  const uint32_t base = SharedAddress(smem);
  const uint32_t full0 = SharedAddress(&bars[0]);
  const uint32_t empty0 = full0 + 8 * kCodeStages;
  const uint32_t x16_full0 = empty0 + 8 * kCodeStages;
  const uint32_t x16_empty0 = x16_full0 + 8 * kWsX16Stages;

  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kWsBn;
  const int64_t m0 = row_tile * kWsBm;
  const int num_kb = static_cast<int>(args.k / kFp8GemmScaleBlock);
  const int num_kt = num_kb / kBlocks;  // k % 128 == 0 (the launcher's condition)
  const int kt_begin = static_cast<int>(int64_t{split} * num_kt / z_splits);
  const int kt_end = static_cast<int>(int64_t{split + 1} * num_kt / z_splits);
  const int stages = kt_end - kt_begin;

  if (tid == 0) {
    for (int s = 0; s < kCodeStages; ++s) {
      MbarrierInit(full0 + 8 * s, 1 + 32);             // expect_tx + the lanes' copies
      MbarrierInit(empty0 + 8 * s, 2 * 128 + 3 * 32);  // consumers + wideners
    }
    for (int s = 0; s < kWsX16Stages; ++s) {
      MbarrierInit(x16_full0 + 8 * s, 3 * 32 + (kPanel ? 1 : 0));  // wideners (+ X's expect_tx)
      MbarrierInit(x16_empty0 + 8 * s, 2 * 128);                   // consumers
    }
    FenceMbarrierInit();
  }
  __syncthreads();

  if (warp < 4) {
    LowerRegisters<kE4m3 ? kWsE4m3ProducerRegs : kWsProducerRegs>();
    if (warp == 0) {
      // The loader: codes by TMA, scale words by cp.async, stage i into slot
      // i % kCodeStages.
      const int64_t n_groups = (args.n + 31) / 32;
      for (int i = 0; i < stages; ++i) {
        const int slot = i % kCodeStages;
        const int kt = kt_begin + i;
        const uint32_t full = full0 + 8 * slot;
        if (i >= kCodeStages) MbarrierWait(empty0 + 8 * slot, ((i / kCodeStages) - 1) & 1);
        const int x_group = grouped.x_stride != 0 ? static_cast<int>(group) : 0;
        if (lane == 0) {
          MbarrierArriveExpectTx(full, kWsCodeSlot);
          const int k_base = kt * kFp8GemmStageK;
          TmaLoadRows(base + slot * kWsCodeSlot, &grouped.w_map, full, k_base, static_cast<int>(n0),
                      static_cast<int>(group));
          if constexpr (!kPanel) {
            TmaLoadRows(base + slot * kWsCodeSlot + kWsCodeTile, &grouped.x_map, full, k_base,
                        static_cast<int>(x_row_base + m0), x_group);
          }
        }
        const uint32_t sc = base + kWsScaleOffset + slot * kWsScaleSlot;
#pragma unroll
        for (int r = 0; r < kWsBm / 32; ++r) {
          const int row = lane + 32 * r;
          const bool ok = m0 + row < args.m;
          CpAsync4(sc + row * 4, args.x_scales + (ok ? (m0 + row) * num_kb + 4 * kt : 0), ok);
        }
        if (lane < kWsBn / 32) {
          const int64_t g = n0 / 32 + lane;
          const bool ok = g < n_groups;
          CpAsync4(sc + (kWsBm + lane) * 4, args.w_scales + (ok ? g * num_kb + 4 * kt : 0), ok);
        }
        CpAsyncArriveOn(full);
        if constexpr (kPanel) {
          // The stage's X from the panel into f16 slot i % kWsX16Stages: two
          // boxes of 128 rows x 128 bytes (64 of K), the slot's two column
          // atoms, at byte 256 kt + 128 a of the panel's rows.
          const int ts = i % kWsX16Stages;
          if (i >= kWsX16Stages) {
            MbarrierWait(x16_empty0 + 8 * ts, ((i / kWsX16Stages) - 1) & 1);
          }
          if (lane == 0) {
            const uint32_t x16_full = x16_full0 + 8 * ts;
            const uint32_t x16 = base + kWsX16Offset + ts * kWsX16Slot;
            MbarrierArriveExpectTx(x16_full, kWsX16Slot);
#pragma unroll
            for (int a = 0; a < 2; ++a) {
              TmaLoadRows(x16 + a * kWsBm * 128, &grouped.x_map, x16_full, kt * 256 + a * 128,
                          static_cast<int>(x_row_base + m0), x_group);
            }
          }
        }
      }
    } else {
      // The wideners: stage i's X codes -> f16 slot i % kWsX16Stages (unless
      // the panel's box brings it), and its scale table.
      const int t = tid - 32;  // 0 .. 95
      for (int i = 0; i < stages; ++i) {
        const int slot = i % kCodeStages;
        const int ts = i % kWsX16Stages;
        MbarrierWait(full0 + 8 * slot, (i / kCodeStages) & 1);
        // kE4m3: the table slot is the code slot's, free once its stage landed.
        if (!kE4m3 && i >= kWsX16Stages) {
          MbarrierWait(x16_empty0 + 8 * ts, ((i / kWsX16Stages) - 1) & 1);
        }
        if constexpr (!kPanel && !kE4m3) {
          const uint32_t x_codes = base + slot * kWsCodeSlot + kWsCodeTile;
          const uint32_t x16 = base + kWsX16Offset + ts * kWsX16Slot;
          for (int u = t; u < kWsBm * 8; u += 96) {
            const int row = u >> 3, q = u & 7;
            WidenCodesToF16Slots(x_codes + Fp8GemmSwizzledOffset(row, q),
                                 x16 + Fp8GemmF16XChunk(row, 2 * q, kWsBm),
                                 x16 + Fp8GemmF16XChunk(row, 2 * q + 1, kWsBm));
          }
        }
        const uint32_t sc = base + kWsScaleOffset + slot * kWsScaleSlot;
        const uint32_t table = base + kWsTableOffset + ts * kWsTableSlot;
        uint32_t w_word[kWsBn / 32];
        bool in_range = true;  // kScaled: this thread's rows and the W scales
#pragma unroll
        for (int g = 0; g < kWsBn / 32; ++g) {
          w_word[g] = LoadShared32(sc + (kWsBm + g) * 4);
          if constexpr (kScaled) {
#pragma unroll
            for (int j = 0; j < kBlocks; ++j) {
              in_range = in_range && Fp8PanelWeightScaleFolds((w_word[g] >> (8 * j)) & 0xFFu);
            }
          }
        }
        for (int row = t; row < kWsBm; row += 96) {
          const uint32_t x_word = LoadShared32(sc + row * 4);
          if constexpr (kE4m3) {
            // A row's four products of a block side by side (the consumers'
            // operand order: Fp8GemmWsE4m3TableIndex).
#pragma unroll
            for (int j = 0; j < kBlocks; ++j) {
              const float sx = ScaleOf(x_word, j);
              float pr[kWsBn / 32];
#pragma unroll
              for (int g = 0; g < kWsBn / 32; ++g) pr[g] = __fmul_rn(ScaleOf(w_word[g], j), sx);
              StoreShared128(table + Fp8GemmWsE4m3TableIndex(j, row, 0) * 4, __float_as_uint(pr[0]),
                             __float_as_uint(pr[1]), __float_as_uint(pr[2]),
                             __float_as_uint(pr[3]));
            }
          } else {
            // Rows past m hold no output; their scale words were zero-filled.
            if constexpr (kScaled) {
              in_range = in_range && (m0 + row >= args.m || Fp8PanelScalesInRange(x_word));
            }
#pragma unroll
            for (int j = 0; j < kBlocks; ++j) {
              const float sx = ScaleOf(x_word, j);
#pragma unroll
              for (int g = 0; g < kWsBn / 32; ++g) {
                const float sw = ScaleOf(w_word[g], j);
                float product = __fmul_rn(sw, sx);
                if constexpr (kScaled) {
                  // The panel holds this block times 2^(e + 6).
                  if (Fp8PanelScaleInRange((x_word >> (8 * j)) & 0xFFu) && isfinite(product)) {
                    product = __fmul_rn(sw, kUnshift);
                  }
                }
                StoreSharedF32(table + Fp8GemmWsTableIndex(j, g, row) * 4, product);
              }
            }
          }
        }
        if constexpr (kScaled) {
          const bool all = __all_sync(0xFFFFFFFFu, in_range);
          if (lane == 0) StoreSharedU32(base + kWsVoteOffset + ts * 16 + (warp - 1) * 4, all);
        }
        // The widened f16 slot is read by wgmma (async proxy); the panel's
        // arrives by TMA, already in that proxy.
        if constexpr (!kPanel && !kE4m3) FenceSharedForAsyncProxy();
        MbarrierArrive(x16_full0 + 8 * ts);
        MbarrierArrive(empty0 + 8 * slot);
      }
    }
    return;
  }

  // ---- consumers ----
  RaiseRegisters<kE4m3 ? kWsE4m3ConsumerRegs : kWsConsumerRegs>();
  const int cw = warp - 4;       // 0 .. 7: W rows 16 cw .. 16 cw + 15 of the tile
  constexpr int kP = kWsBm / 2;  // floats of one block sum a thread
  float acc[1][kWsBm / 8][4];
  ZeroAccumulators(acc);
  const int g_local = cw / 2;  // the warp's weight scale row in the tile
  const int quad = lane & 3;
  auto make_a = [&](uint32_t w_base, int j, F16A& a) {
    uint32_t a8[4];
    const Fp8GemmRowChunk src = Fp8GemmALdmatrixSource(lane, j);
    LdMatrixX4(w_base + Fp8GemmSwizzledOffset(cw * 16 + src.row, src.chunk), a8[0], a8[1], a8[2],
               a8[3]);
    a = WidenA(a8);
  };
  auto pin_a = [](F16A& a) {
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      PinRegister(a.lo[q]);
      PinRegister(a.hi[q]);
    }
  };
  F16A a[2];
  // fold_splits: the splits' sums so far (split 0, then + split 1, ...), and
  // the first stage of the next split.
  const int folds = grouped.fold_splits ? args.splits : 1;
  float total[1][kWsBm / 8][4];
  int next_split = 1;
  int boundary = folds > 1 ? num_kt / folds : stages;
  // The fold of block j's half h (X rows 64 h .. 64 h + 63, the quad's rows
  // 8 ni + 2 quad + {0, 1} for ni = 8 h .. 8 h + 7): 16 floats of sw sx from
  // the table (4 x 16 bytes), each accumulator's fma.
  auto fold_half = [&](uint32_t table, int j, int h, const float(&ph)[kP / 2]) {
    const uint32_t tj = table + Fp8GemmWsQuadBase(j, g_local, quad) * 4;
    uint32_t s[4][4];
#pragma unroll
    for (int v = 0; v < 4; ++v) LoadShared128(tj + (h * 16 + v * 4) * 4, s[v]);
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const int ni = h * 8 + e;
      const float sx0 = __uint_as_float(s[e / 2][(e % 2) * 2]);
      const float sx1 = __uint_as_float(s[e / 2][(e % 2) * 2 + 1]);
      acc[0][ni][0] = __fmaf_rn(ph[4 * e + 0], sx0, acc[0][ni][0]);
      acc[0][ni][1] = __fmaf_rn(ph[4 * e + 1], sx1, acc[0][ni][1]);
      acc[0][ni][2] = __fmaf_rn(ph[4 * e + 2], sx0, acc[0][ni][2]);
      acc[0][ni][3] = __fmaf_rn(ph[4 * e + 3], sx1, acc[0][ni][3]);
    }
  };
  // A split's first stage (fold_splits): bank the previous splits' sum.
  auto bank_split = [&] {
#pragma unroll
    for (int ni = 0; ni < kWsBm / 8; ++ni) {
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        total[0][ni][r] =
            next_split == 1 ? acc[0][ni][r] : __fadd_rn(total[0][ni][r], acc[0][ni][r]);
        acc[0][ni][r] = 0.0f;
      }
    }
    ++next_split;
    boundary = next_split < folds ? static_cast<int>(int64_t{next_split} * num_kt / folds) : stages;
  };
  if constexpr (kE4m3) {
    // Operands swapped against the f16 instances: the wgmma's M is the
    // warpgroup's 64 X rows of the code slot (A) and its N the CTA's 128 W
    // rows (B), both by descriptor; block j adds 32 bytes (2 in the address
    // field). So a thread's accumulators cover 2 X rows (x_row, x_row + 8)
    // and 32 W rows of 4 weight scale rows: its fold needs 8 products a
    // block (two 16-byte loads of the table), where the other layout needs
    // 32. The products x w are the same, so are the block sums
    // (WarpSpecializedTileGivesTheWgmmaBits).
    // A thread's first X row (its warp's 16 of the warpgroup's 64, lane / 4)
    // and its warpgroup, from the thread index.
    auto x_row_of = [](uint32_t tx) {
      return static_cast<int>(((tx >> 7) - 1) * 64 + ((tx >> 5) & 3) * 16 + ((tx & 31) >> 2));
    };
    auto warpgroup_of = [](uint32_t tx) { return static_cast<int>(tx >> 7) - 1; };
    const int x_row = x_row_of(static_cast<uint32_t>(tid));
    float p[2][kP];
    // Block j's 8 products: X rows x_row and x_row + 8, four W scale rows.
    // `row_at` is x_row's byte offset in a block's table, re-derived from the
    // thread index where it is needed (kept live across the stage loop, it
    // was spilled and reloaded every stage).
    auto load_products = [&](uint32_t row_at, uint32_t table, int j, uint32_t(&s)[2][4]) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        LoadShared128(table + row_at + Fp8GemmWsE4m3TableIndex(j, 8 * h, 0) * 4, s[h]);
      }
    };
    auto fold = [&](const uint32_t(&s)[2][4], const float(&pj)[kP]) {
#pragma unroll
      for (int ni = 0; ni < kWsBn / 8; ++ni) {
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          acc[0][ni][r] =
              __fmaf_rn(pj[4 * ni + r], __uint_as_float(s[r >> 1][ni / 4]), acc[0][ni][r]);
        }
      }
    };
    for (int i = 0; i < stages; ++i) {
      if (i == boundary) bank_split();  // split next_split starts
      const int slot = i % kCodeStages;
      const uint32_t codes = base + slot * kWsCodeSlot;
      // The thread index read again each stage: the offsets derived from it
      // (the warpgroup's X rows here, the table row below), kept live across
      // the stage loop, were spilled and reloaded every stage.
      uint32_t tx;
      asm volatile("mov.u32 %0, %%tid.x;" : "=r"(tx));
      const uint32_t x_lo =
          SwizzledKMajorDescriptorLo(codes + kWsCodeTile + warpgroup_of(tx) * 64 * kFp8GemmStageK);
      const uint32_t w_lo = SwizzledKMajorDescriptorLo(codes);
      const uint32_t table = base + kWsTableOffset + slot * kWsTableSlot;
      auto issue = [&](int j, float(&d)[kP]) {
        Wgmma<kWsBn>::SS(DescriptorOf(x_lo + ((j * 32) >> 4)), DescriptorOf(w_lo + ((j * 32) >> 4)),
                         d);
      };
      MbarrierWait(full0 + 8 * slot, (i / kCodeStages) & 1);
      WgmmaFence();
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        issue(j, p[j]);
        WgmmaCommit();
      }
      MbarrierWait(x16_full0 + 8 * slot, (i / kCodeStages) & 1);  // the stage's table
      // Each block's products are loaded a block ahead, under the fold before.
      const uint32_t row_at =
          static_cast<uint32_t>(Fp8GemmWsE4m3TableIndex(0, x_row_of(tx), 0) * 4);
      uint32_t products[2][2][4];
      load_products(row_at, table, 0, products[0]);
#pragma unroll
      for (int j = 0; j < kBlocks; ++j) {
        WgmmaWait(min(kBlocks, j + 2) - 1 - j);
#pragma unroll
        for (int r = 0; r < kP; ++r) PinRegister(p[j & 1][r]);
        if (j + 1 < kBlocks) load_products(row_at, table, j + 1, products[(j + 1) & 1]);
        fold(products[j & 1], p[j & 1]);
        if (j + 2 < kBlocks) {
          WgmmaFence();
          issue(j + 2, p[j & 1]);
          WgmmaCommit();
        }
      }
      MbarrierArrive(empty0 + 8 * slot);  // its wgmmas retired, its table read
    }
    if (folds > 1) {
#pragma unroll
      for (int ni = 0; ni < kWsBn / 8; ++ni) {
#pragma unroll
        for (int r = 0; r < 4; ++r) acc[0][ni][r] = __fadd_rn(total[0][ni][r], acc[0][ni][r]);
      }
    }
    // acc[0][ni][r]: X row x_row + 8 (r / 2), W row 8 ni + 2 quad + r % 2.
#pragma unroll
    for (int ni = 0; ni < kWsBn / 8; ++ni) {
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int64_t gm = m0 + x_row + 8 * (r >> 1), gn = n0 + 8 * ni + 2 * quad + (r & 1);
        if (gm >= args.m || gn >= args.n) continue;
        if (z_splits > 1) {
          args.partial[gm * args.n + gn] = acc[0][ni][r];
        } else {
          StoreY(args, gm * args.n + gn, acc[0][ni][r]);
        }
      }
    }
    return;
  } else if constexpr (kHalves) {
    // Half h of block j's sums from the f16 slot `x_desc` into ph (one group).
    auto issue_half = [&](uint64_t x_desc, int j, int h, const F16A& aj, float(&ph)[kP / 2]) {
      const int at = (j >> 1) * kWsBm * 128 + (j & 1) * 64 + h * (kWsBm / 2) * 128;
      WgmmaFence();
      WgmmaF16<kWsBm / 2>::RSZero(aj.lo, x_desc + static_cast<uint64_t>(at >> 4), ph);
      WgmmaF16<kWsBm / 2>::RS(aj.hi, x_desc + static_cast<uint64_t>((at + 32) >> 4), ph, true);
      WgmmaCommit();
    };
    float p[2][kP / 2];
    for (int i = 0; i < stages; ++i) {
      if (i == boundary) bank_split();  // split next_split starts
      const int slot = i % kCodeStages;
      const int ts = i % kWsX16Stages;
      const uint32_t w_base = base + slot * kWsCodeSlot;
      const uint64_t x_desc =
          DescriptorOf(SwizzledKMajorDescriptorLo(base + kWsX16Offset + ts * kWsX16Slot));
      const uint32_t table = base + kWsTableOffset + ts * kWsTableSlot;
      // The stage's first item. Nothing is in flight across the stage loop's
      // back edge: with the next stage's first item issued there, ptxas
      // serialized every wgmma of the loop (C7514).
      MbarrierWait(full0 + 8 * slot, (i / kCodeStages) & 1);
      make_a(w_base, 0, a[0]);
      MbarrierWait(x16_full0 + 8 * ts, (i / kWsX16Stages) & 1);
      issue_half(x_desc, 0, 0, a[0], p[0]);
#pragma unroll
      for (int j = 0; j < kBlocks; ++j) {
        // Item (i, j, 0) is in flight: issue (i, j, 1), fold (i, j, 0).
        issue_half(x_desc, j, 1, a[j & 1], p[1]);
        WgmmaWait(1);
        pin_a(a[j & 1]);
#pragma unroll
        for (int r = 0; r < kP / 2; ++r) PinRegister(p[0][r]);
        fold_half(table, j, 0, p[0]);
        // Item (i, j, 1) is in flight: issue block j + 1's first half, fold
        // (i, j, 1); the stage's last block drains.
        if (j + 1 < kBlocks) {
          make_a(w_base, j + 1, a[(j + 1) & 1]);
          issue_half(x_desc, j + 1, 0, a[(j + 1) & 1], p[0]);
          WgmmaWait(1);
        } else {
          MbarrierArrive(empty0 + 8 * slot);  // the W codes of this stage are in registers
          WgmmaWait(0);
        }
        pin_a(a[j & 1]);
#pragma unroll
        for (int r = 0; r < kP / 2; ++r) PinRegister(p[1][r]);
        fold_half(table, j, 1, p[1]);
      }
      MbarrierArrive(x16_empty0 + 8 * ts);  // every wgmma of this f16 slot has retired
    }
  } else {
    for (int i = 0; i < stages; ++i) {
      if (i == boundary) bank_split();  // split next_split starts
      const int slot = i % kCodeStages;
      const int ts = i % kWsX16Stages;
      const uint32_t w_base = base + slot * kWsCodeSlot;
      MbarrierWait(full0 + 8 * slot, (i / kCodeStages) & 1);
      make_a(w_base, 0, a[0]);
      MbarrierWait(x16_full0 + 8 * ts, (i / kWsX16Stages) & 1);
      const uint64_t x_desc =
          DescriptorOf(SwizzledKMajorDescriptorLo(base + kWsX16Offset + ts * kWsX16Slot));
      const uint32_t table = base + kWsTableOffset + ts * kWsTableSlot;
      // kScaled: every widener warp voted the stage in range: one factor a
      // block, sw 2^-6 of the warp's W scale row, instead of the table.
      bool uniform = false;
      float factor[kBlocks] = {};
      if constexpr (kScaled) {
        uint32_t votes[4];
        LoadShared128(base + kWsVoteOffset + ts * 16, votes);
        uniform = (votes[0] & votes[1] & votes[2]) != 0u;
        if (uniform) {
          const uint32_t w_word =
              LoadShared32(base + kWsScaleOffset + slot * kWsScaleSlot + (kWsBm + g_local) * 4);
#pragma unroll
          for (int j = 0; j < kBlocks; ++j) factor[j] = __fmul_rn(ScaleOf(w_word, j), kUnshift);
        }
      }
#pragma unroll
      for (int j = 0; j < kBlocks; ++j) {
        float p[kP];
        const int at = (j >> 1) * kWsBm * 128 + (j & 1) * 64;
        WgmmaFence();
        WgmmaF16<kWsBm>::RSZero(a[j & 1].lo, x_desc + static_cast<uint64_t>(at >> 4), p);
        WgmmaF16<kWsBm>::RS(a[j & 1].hi, x_desc + static_cast<uint64_t>((at + 32) >> 4), p, true);
        WgmmaCommit();
        if (j + 1 < kBlocks) {
          make_a(w_base, j + 1, a[(j + 1) & 1]);
        } else {
          MbarrierArrive(empty0 + 8 * slot);  // the W codes of this stage are in registers
        }
        WgmmaWait(0);
        pin_a(a[j & 1]);
#pragma unroll
        for (int r = 0; r < kP; ++r) PinRegister(p[r]);
        if (kScaled && uniform) {
#pragma unroll
          for (int ni = 0; ni < kWsBm / 8; ++ni) {
#pragma unroll
            for (int r = 0; r < 4; ++r) {
              acc[0][ni][r] = __fmaf_rn(p[4 * ni + r], factor[j], acc[0][ni][r]);
            }
          }
        } else {
          // The fold, the two halves in order.
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            fold_half(table, j, h, *reinterpret_cast<const float(*)[kP / 2]>(p + h * (kP / 2)));
          }
        }
      }
      MbarrierArrive(x16_empty0 + 8 * ts);  // every wgmma of this f16 slot has retired
    }
  }

  if (folds > 1) {
#pragma unroll
    for (int ni = 0; ni < kWsBm / 8; ++ni) {
#pragma unroll
      for (int r = 0; r < 4; ++r) acc[0][ni][r] = __fadd_rn(total[0][ni][r], acc[0][ni][r]);
    }
  }
  ForEachOutput(acc, lane, n0 + cw * 16, m0, args.n, args.m, [&](int64_t gm, int64_t gn, float v) {
    if (z_splits > 1) {
      args.partial[gm * args.n + gn] = v;
    } else {
      StoreY(args, gm * args.n + gn, v);
    }
  });
}

}  // namespace fp8_gemm
}  // namespace weir::kernels::cuda::dense

#endif  // WEIR_KERNELS_CUDA_DENSE_FP8_BLOCK_GEMM_WS_SM90_CUH_
