// kernels/cuda/moe/mxfp4_bf16_rs_sm90.cuh — Mxfp4Bf16GroupedGemm's second
// form (Mxfp4Bf16GroupedGemmParams::register_a): the consumers widen their
// own W fragments in registers and issue wgmma with A from registers, so no
// widened W tile is written to or read from shared memory. Device code only;
// included by mxfp4_bf16_gemm_sm90.cu after mxfp4_bf16_gemm_sm90.cuh.
//
//  * warps 0 - 7 (two consumer warpgroups, or 0 - 11 with three: kWgs;
//    warpgroup c holds W rows 64 c .. 64 c + 63 of the CTA's 128 (192), and
//    the CTA's kRows X rows: 128, 80 for
//    prefill experts of few rows, 64 - 8 for decode; wgmma N = kRows): per
//    stage of 64 of K a thread reads its two W rows' 32 code bytes each
//    (lane / 4 and + 8 of its warp's 16, every lane of a quad the same bytes:
//    a broadcast) and their two scale bytes from the ring slot, gathers byte
//    lane % 4 of each code word (prmt), widens them to bf16 (E2m1x4ToBf16x2
//    and one bf16x2 multiply a pair, as the widener warps do; through fp32
//    for the rare scales) into the wgmma A fragments of the stage's four K
//    steps, and issues the stage's four `wgmma m64nNk16` (A registers, X by
//    descriptor). The fragments are double-buffered: stage i + 1's are
//    widened while stage i's wgmma run, and written only after the group
//    that read them has retired (wait_group 1).
//  * warp 8 (12 with three; the producer): per stage, once the slot is free, lane 0 brings
//    the X box by TMA (kRows rows x 128 bytes, 128-byte swizzle) and the 32
//    lanes copy the W tile's codes (128 rows x 32 bytes) and each row's scale
//    word by cp.async; the lanes arrive on the slot's `full` once their copies
//    have landed, waiting for them kRsDepth - 1 stages behind, or (kDeepRing)
//    letting the copies arrive themselves.
// The wgmma sum the same bf16 values in the same order as the widening tile
// (mxfp4_bf16_gemm_sm90.cuh) and dense::Bf16Gemm's kN128M128Ws: only where A
// comes from differs, so a row's bits are theirs.
#ifndef WEIR_KERNELS_CUDA_MOE_MXFP4_BF16_RS_SM90_CUH_
#define WEIR_KERNELS_CUDA_MOE_MXFP4_BF16_RS_SM90_CUH_

#include <type_traits>

#include "kernels/cuda/cluster.cuh"
#include "kernels/cuda/decode/swiglu.cuh"
#include "kernels/cuda/dense/act_quant_fp8.cuh"
#include "kernels/cuda/moe/mxfp4_bf16_gemm_sm90.cuh"

namespace weir::kernels::cuda::moe::mxfp4_bf16 {

inline constexpr int kRsMaxStages = 16;  // ring slots at most (RsSlot::kStages)
inline constexpr int kRsDepth = 4;  // without kDeepRing: the producer's copies kRsDepth - 1 ahead
inline constexpr int kRsThreads = kConsumers + 32;
// Threads of a CTA with kWgs consumer warpgroups (2: kRsThreads; 3:
// Mxfp4Bf16GroupedGemmParams::consumer_warpgroups), and its W rows.
__host__ __device__ constexpr int RsThreadsWith(int wgs) { return 128 * wgs + 32; }
// The threads of a CTA over kRows X rows: the 256-row tile's producer is a
// whole warpgroup (one warp copies, three leave), so the warpgroups can trade
// registers (setmaxnreg: the producer's down to kRs256ProducerRegs, the
// consumers' up to kRs256ConsumerRegs for N 256's 128 accumulators; at
// launch ptxas gives 384 threads 168). With 168 a thread the compiler
// serialized the wgmma (ptxas C7512); 40 / 232 and 56 / 224 spilled in the
// producer, 88 / 208 spills nothing (ptxas -v, CUDA 13).
__host__ __device__ constexpr int RsCtaThreads(int rows, int wgs) {
  return rows == 256 ? 128 * (wgs + 1) : RsThreadsWith(wgs);
}
inline constexpr int kRs256ProducerRegs = 88;
inline constexpr int kRs256ConsumerRegs = 208;  // 2 x 128 x 208 + 128 x 88 = 64,512 = 384 x 168
static_assert(2 * 128 * kRs256ConsumerRegs + 128 * kRs256ProducerRegs <= 384 * 168,
              "setmaxnreg trades only the registers the CTA got at launch");
// With a tail (tail_rows) the consumers hold 16 accumulators more: 72 / 216
// (2 x 128 x 216 + 128 x 72 = 64,512 = 384 x 168, the CTA's registers at
// launch; at 88 / 208 the fused SwiGLU's instance spilled 12 bytes). The
// pair must fit what the CTA was given at launch, not the SM's 65,536:
// 80 / 216 (65,536) left the consumers' setmaxnreg.inc waiting for
// registers no warp would free, and the kernel hung (H100, forty-third
// session).
inline constexpr int kRs256TailProducerRegs = 72;
inline constexpr int kRs256TailConsumerRegs = 216;
static_assert(2 * 128 * kRs256TailConsumerRegs + 128 * kRs256TailProducerRegs <= 384 * 168,
              "setmaxnreg trades only the registers the CTA got at launch");
__host__ __device__ constexpr int RsTileN(int wgs) { return 64 * wgs; }

// A ring slot over kRows X rows (128, 80, or 8 - 64 for decode;
// Mxfp4Bf16GroupedGemmParams::x_rows): the X box (kRows x 128 bytes,
// 128-byte swizzle), the W tile's codes (kTileN rows x 32 bytes: 128, or 192
// with three consumer warpgroups), a scale word a W row; 1024-byte aligned.
// Narrow tiles get twice the slots: their stages are short, so more of them
// must be in flight to cover a memory latency; the 256-row tile (37 KB a
// slot) five, its stages twice the 128-row tile's tensor work.
//
// kTail (Mxfp4Bf16GroupedGemmParams::tail_rows; kRows 256 only): the X box
// is followed by the tail's kTail rows (their own box, 41 KB a slot with
// 32), brought only for a tile whose expert has rows there.
template <int kRows, int kTileN = kBn, int kTail = 0>
struct RsSlot {
  static_assert(kRows % 8 == 0 && (kRows <= 128 || kRows == 256));
  static_assert(kTail == 0 || (kRows == 256 && kTail % 8 == 0 && kTail <= 64));
  static constexpr int kStages = kRows == 256 ? 5 : kRows >= 64 ? 8 : kRsMaxStages;
  static_assert(kRsDepth < kStages, "the producer waits for slots the consumers free");
  static constexpr int kXMain = kRows * 128;  // the main box's bytes
  static constexpr int kX = (kRows + kTail) * 128;
  static constexpr int kCodes = kX;
  static constexpr int kScales = kCodes + kTileN * 32;
  static constexpr int kBytes = (kScales + kTileN * 4 + 1023) / 1024 * 1024;
  static constexpr int kShared = kStages * kBytes;
  static_assert(kShared + dense::fp8_gemm::kWgmmaSmemSlack <= 227 * 1024, "an SM's shared memory");
};

// Eight codes of one W row (nibble i element i of the word's order below)
// under one E8M0 scale byte -> four bf16x2 registers, as the widener warps
// widen them (Mxfp4ToBf16EightBf16Mul, or Mxfp4ToBf16Eight through fp32 for
// scales 0, 1 and 0xFF and for an unreadable weight, NaN).
// `j` names the scale's byte in `scale_word`.
__device__ __forceinline__ void WidenEight(uint32_t v, uint32_t scale_word, int j, bool bad,
                                           const E2m1Bf16Tables& tables, uint32_t (&o)[4]) {
  const uint32_t scale = (scale_word >> (8 * j)) & 0xFFu;
  if (!bad && Mxfp4ScaleMultipliesInBf16(scale)) {
    Mxfp4ToBf16EightBf16Mul(v, (scale << 7) * 0x00010001u, tables, o);
  } else {
    float s = dense::fp8_gemm::ScaleOf(scale_word, j);
    if (bad) s = __uint_as_float(0x7FC00000u);
    Mxfp4ToBf16Eight(v, s, o);
  }
}

// One unit of the route's gated epilogues (this form's 256-row tile and
// the decode form's): eight columns col0 .. col0 + 7 of one X row of a tile
// whose sums are staged in shared memory, `sums` that row's gate sums and
// sums + up_at its up sums, into h's FP8 form at h's columns n0 + col0 .. of
// X row `row`, as Swiglu's FP8 kernel makes it from the same fp32 sums
// (SwigluOf, ActQuantEight). Four consecutive lanes hold a 32-column block,
// and every lane of the warp reaches ActQuantEight's shuffles (`active`
// false for a unit past the rows or columns). kWithBf16: with a.h_bf16 also
// the bf16 values of the codes (ActQuantEight's dq8).
template <bool kWithBf16>
__device__ __forceinline__ void SwigluFp8Unit(const Args& a, const float* sums, int up_at, int col0,
                                              bool active, int64_t row, int64_t n0) {
  float v[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  if (active) {
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const float g = sums[col0 + e];
      const float up = sums[up_at + col0 + e];
      v[e] = a.round_bf16 ? decode::SwigluOf<true>(g, up, a.route_weight, row, a.limit)
                          : decode::SwigluOf<false>(g, up, a.route_weight, row, a.limit);
    }
  }
  const int64_t at = row * a.n + n0 + col0;
  if constexpr (kWithBf16) {
    dense::ActQuantEight(v, active, a.h_codes + at, a.h_scales + at / 32,
                         a.h_bf16 != nullptr ? a.h_bf16 + at : nullptr);
  } else {
    dense::ActQuantEight(v, active, a.h_codes + at, a.h_scales + at / 32);
  }
}

// kDeepRing (Mxfp4Bf16GroupedGemmParams::deep_ring): the producer's copies
// complete on the slot's `full` barrier (cp.async.mbarrier.arrive.noinc, as
// Fp8BlockGemm's warp-specialized tile does) instead of the producer waiting
// for them kRsDepth - 1 stages behind, so every free slot of the ring is in
// flight at once and the producer never waits on global memory.
//
// kStageTest (Mxfp4Bf16GroupedGemmParams::stage_scale_test): a consumer tests
// the four scale bytes of its stage (two rows, two K blocks) once and widens
// the stage's four 8-code groups without a branch between them, by the bf16
// multiply where all four are plain, else all four through fp32 (exact for
// every scale, so the same bits as the per-group choice).
//
// kFitN (Mxfp4Bf16GroupedGemmParams::fit_tile_rows; kRows 128 only): the
// consumers' wgmma N is the fewest of 16, 32, 64, 80 and 128 that holds the
// CTA's rows of its expert (65 an expert at the EP8 chunk's shapes: N 80
// instead of 128), the X box still kRows rows. Each row's sums are the same
// 16 products in the same order, so the same bits.
//
// kWgs (Mxfp4Bf16GroupedGemmParams::consumer_warpgroups): consumer
// warpgroups a CTA, each over 64 W rows: 2 (128 W rows), or 3 (192: a third
// more warps an SM to cover the stage's latencies, each X stage serving 1.5x
// the W rows). A row's sums do not change.
//
// kRows 256 (Mxfp4Bf16GroupedGemmParams::x_rows 256; with the deep ring, the
// one scale test a stage and two warpgroups): a CTA's 256 X rows, wgmma N
// 256, so a stage's widened fragments feed twice the products of N 128 (the
// route's loop at the EP8 chunk's 512 rows an expert spent about a third of
// its issue slots widening, its tensor pipe 45 % busy). A tile holding at
// most 128 rows of its expert runs N 128 (its accumulators and stores those
// of the 128-row tile). The same 16 products a K step in the same order a
// row, so the same bits.
//
// kSwiglu (Mxfp4Bf16GroupedGemmParams::swiglu; kRows 256 only): the gate
// and up products and the SwiGLU in one launch. A CTA's W tile is 64 rows of
// the gate's weight (warpgroup 0) over the same 64 rows of the up product's
// (warpgroup 1); once both warpgroups' sums are done the ring is free, so
// they stage their sums there and the 256 consumer threads make h's FP8 form
// of the tile's 64 intermediate columns, each 8-element unit as
// SwigluFp8Kernel makes it (SwigluOf, ActQuantEight: the same bits from the
// same fp32 sums), instead of writing gate and up in fp32 for a SwiGLU
// launch to read (the EP8 chunk: 453 MB a layer, the SwiGLU 13.7 ms).
//
// kTail (Mxfp4Bf16GroupedGemmParams::tail_rows; kRows 256 only): an
// expert's last tile holds up to kTail rows past 256 (Mxfp4Bf16GroupTiles),
// brought by a second TMA box behind the main one, and the consumers issue
// a wgmma of N kTail over them beside each N 256 one (the same A
// registers), so an expert of 513 - 544 rows takes two tiles, not three.
// Each row's sums are the same 16 products in the same order.
//
// kMulticast (Mxfp4Bf16GroupedGemmParams::x_multicast; kRows 256 only): the
// grid runs in clusters of two CTAs along x, the same X tile (blockIdx.y)
// over two W tiles, and each CTA's producer brings half of the stage's X box
// (128 rows, rank r the rows 128 r ..) into both CTAs' slots by one TMA
// multicast, and CTA 0 the tail box so: the X tile, 8 of every 9 bytes a
// stage reads, comes from L2 once for two CTAs instead of twice (the route's
// ncu: consumers waiting on `full` with DRAM 11 % busy; at ~1,700 cycles a
// stage 36 KB a CTA is about 5 TB/s of L2 reads over the GPU). A slot is
// refilled only once both CTAs' consumers have released it: each consumer
// warp also arrives on the peer's `empty` (one arrival a warp), but only for
// stages the peer refills, so no arrival reaches a CTA that may have left;
// a cluster barrier after the barriers' initialization and one at the end
// (every thread that has not exited) keep each CTA's shared memory alive
// while the other may write it. The same products in the same order, so the
// same bits.
template <int kRows, bool kDeepRing, bool kStageTest = false, bool kFitN = false, int kWgs = 2,
          bool kSwiglu = false, int kTail = 0, bool kMulticast = false>
__global__ void __launch_bounds__(RsCtaThreads(kRows, kWgs), 1)
    Mxfp4Bf16GroupedRsKernel(const __grid_constant__ Args a) {
  GridDependencyPrologue();
  static_assert(kWgs == 2 || kWgs == 3);
  static_assert(kRows != 256 || (kDeepRing && kStageTest && !kFitN && kWgs == 2),
                "the 256-row tile's one combination");
  static_assert(!kSwiglu || kRows == 256, "the fused SwiGLU is the 256-row tile's");
  static_assert(kTail == 0 || kRows == 256, "the tail is the 256-row tile's");
  static_assert(!kMulticast || kRows == 256, "the multicast X is the 256-row tile's");
  constexpr int kCons = 128 * kWgs, kTileN = RsTileN(kWgs);
  using Slot = RsSlot<kRows, kTileN, kTail>;
  constexpr int kRsSlot = Slot::kBytes, kRsCodes = Slot::kCodes, kRsScales = Slot::kScales;
  constexpr int kRsStages = Slot::kStages;
  using dense::fp8_gemm::AlignSharedTo1024;
  using dense::fp8_gemm::DescriptorOf;
  using dense::fp8_gemm::SwizzledKMajorDescriptorLo;
  using dense::fp8_gemm::WgmmaCommit;
  using dense::fp8_gemm::WgmmaFence;
  using dense::fp8_gemm::WgmmaWait;

  const GroupTile gt = GroupTileOf(a, kRows, kTail);
  if (gt.group < 0) return;
  const int64_t begin = gt.begin;
  const int64_t m = gt.end - begin;  // the group's rows; this CTA's are m0 .. m0 + kRows - 1
  const int64_t m0 = gt.tile * kRows;
  // The expert's last tile with rows past kRows: they are the tail's (at
  // most kTail: Mxfp4Bf16GroupTiles), so the tail box comes too. Uniform.
  const bool tail = kTail > 0 && m - m0 > kRows;
  // kSwiglu: W rows 0 - 63 of the tile are the gate's n0 .., 64 - 127 the
  // up product's n0 .. (kSwiN rows of each).
  constexpr int kSwiN = kTileN / 2;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * (kSwiglu ? kSwiN : kTileN);
  const int stages = static_cast<int>(a.k / kMxfp4Bf16StageK);
  const uint8_t* const w = a.w[gt.group];
  const uint8_t* const ws = a.w_scales[gt.group];
  const uint8_t* const w_up = kSwiglu ? a.w_up[gt.group] : nullptr;
  const uint8_t* const ws_up = kSwiglu ? a.w_up_scales[gt.group] : nullptr;
  const bool bad = UnreadableWeight(w, ws) || (kSwiglu && UnreadableWeight(w_up, ws_up));
  // The weight row (its codes and scales, and whether it exists) that W tile
  // row `row` holds.
  struct WRow {
    const uint8_t* codes;
    const uint8_t* scales;
    bool ok;
  };
  const auto w_row = [&](int row, int64_t code_row, int64_t scale_row) {
    const bool up = kSwiglu && row >= kSwiN;
    const int64_t gn = n0 + (kSwiglu ? row % kSwiN : row);
    const bool ok = !bad && gn < a.n;
    return WRow{(up ? w_up : w) + gn * code_row, (up ? ws_up : ws) + gn * scale_row, ok};
  };

  __shared__ __align__(8) uint64_t bars[2 * kRsStages];
  extern __shared__ __align__(128) uint8_t smem_raw[];
  const uint32_t base = SharedAddress(AlignSharedTo1024(smem_raw));
  const uint32_t full0 = SharedAddress(&bars[0]);
  const uint32_t empty0 = full0 + 8 * kRsStages;
  const int tid = static_cast<int>(threadIdx.x);
  const int warp = tid >> 5;
  const int lane = tid & 31;
  // kMulticast: this CTA's rank in its pair; the peer's `empty` barriers.
  const unsigned rank = kMulticast ? ClusterCtaRank() : 0u;
  const uint32_t peer_empty0 = kMulticast ? ClusterSharedAddressOf(empty0, rank ^ 1u) : 0u;
  if (tid == 0) {
    for (int s = 0; s < kRsStages; ++s) {
      MbarrierInit(full0 + 8 * s, 1 + 32);  // lane 0's expect_tx + the producer's lanes
      // This CTA's consumer threads, and with kMulticast one arrival a warp of the peer's.
      MbarrierInit(empty0 + 8 * s, kCons + (kMulticast ? kCons / 32 : 0));
    }
    FenceMbarrierInit();
  }
  if constexpr (kMulticast) {
    ClusterSync();  // both CTAs' barriers are initialized before either's copies or arrivals
  } else {
    __syncthreads();
  }

  if (warp >= kCons / 32) {        // ---- the producer ----
    if constexpr (kRows == 256) {  // its warpgroup gives registers to the consumers'
      asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kTail > 0 ? kRs256TailProducerRegs
                                                                           : kRs256ProducerRegs));
      if (warp > kCons / 32) {
        if constexpr (kMulticast) ClusterSync();  // the closing phase (below)
        return;
      }
    }
    const int64_t code_row = a.k / 2, scale_row = a.k / 32;
    const auto issue = [&](int i) {
      const int slot = i % kRsStages;
      if (i >= kRsStages) {
        // kMulticast: the peer's consumers arrived too (release at cluster scope).
        if constexpr (kMulticast) {
          MbarrierWaitCluster(empty0 + 8 * slot, ((i / kRsStages) - 1) & 1);
        } else {
          MbarrierWait(empty0 + 8 * slot, ((i / kRsStages) - 1) & 1);
        }
      }
      const uint32_t at = base + slot * kRsSlot;
      if (lane == 0) {
        MbarrierArriveExpectTx(full0 + 8 * slot, tail ? Slot::kX : Slot::kXMain);
        if constexpr (kMulticast) {  // half the box each, into both CTAs' slots
          constexpr int kHalf = kRows / 2;
          TmaLoadRowsMulticast(at + rank * kHalf * 128, &a.x_map, full0 + 8 * slot,
                               i * kMxfp4Bf16StageK * 2,
                               static_cast<int>(begin + m0 + kHalf * rank), 0, 0x3);
          if (tail && rank == 0) {
            TmaLoadRowsMulticast(at + Slot::kXMain, &a.x_tail_map, full0 + 8 * slot,
                                 i * kMxfp4Bf16StageK * 2, static_cast<int>(begin + m0 + kRows), 0,
                                 0x3);
          }
        } else {
          TmaLoadRows(at, &a.x_map, full0 + 8 * slot, i * kMxfp4Bf16StageK * 2,
                      static_cast<int>(begin + m0), 0);
          if (tail) {
            TmaLoadRows(at + Slot::kXMain, &a.x_tail_map, full0 + 8 * slot,
                        i * kMxfp4Bf16StageK * 2, static_cast<int>(begin + m0 + kRows), 0);
          }
        }
      }
#pragma unroll
      for (int j = 0; j < kTileN * 2 / 32; ++j) {  // 16-byte halves of the rows' codes
        const int u = lane + 32 * j, row = u >> 1, h = u & 1;
        const WRow r = w_row(row, code_row, scale_row);
        const void* src = r.ok ? static_cast<const void*>(r.codes + i * 32 + h * 16)
                               : static_cast<const void*>(a.x);
        CpAsync16(at + kRsCodes + row * 32 + h * 16, src, r.ok);
      }
#pragma unroll
      for (int j = 0; j < kTileN / 32; ++j) {  // each row's scale word of this stage
        const int row = lane + 32 * j;
        const WRow r = w_row(row, code_row, scale_row);
        const void* src = r.ok ? static_cast<const void*>(r.scales + ((2 * i) & ~3))
                               : static_cast<const void*>(a.x);
        dense::fp8_gemm::CpAsync4(at + kRsScales + row * 4, src, r.ok);
      }
      CpAsyncCommit();
    };
    if constexpr (kDeepRing) {
      for (int i = 0; i < stages; ++i) {
        issue(i);
        CpAsyncArriveOn(full0 + 8 * (i % kRsStages));
      }
      CpAsyncWait<0>();  // the warp stays until its last copies have landed
      if constexpr (kMulticast) {
        __syncwarp();   // converged for the .aligned barrier
        ClusterSync();  // the closing phase (below)
      }
    } else {
      // One group committed an iteration (empty past the last stage), so
      // wait_group kRsDepth - 1 means "stage i - (kRsDepth - 1) has landed".
      for (int i = 0; i < stages + kRsDepth - 1; ++i) {
        if (i < stages) {
          issue(i);
        } else {
          CpAsyncCommit();
        }
        if (i >= kRsDepth - 1) {
          CpAsyncWait<kRsDepth - 1>();
          MbarrierArrive(full0 + 8 * ((i - (kRsDepth - 1)) % kRsStages));
        }
      }
    }
    return;
  }

  // ---- the consumers ----
  if constexpr (kRows == 256) {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kTail > 0 ? kRs256TailConsumerRegs
                                                                         : kRs256ConsumerRegs));
  }
  const E2m1Bf16Tables tables = a.tables;
  const uint32_t c = static_cast<uint32_t>(lane & 3);
  const auto prmt = [](uint32_t x, uint32_t y, uint32_t sel) { return PrmtB32(x, y, sel); };
  const int row0 = warp * 16 + (lane >> 2);  // and row0 + 8: this thread's W rows of the tile
  // Stage i's fragments: f[4 s + r] is register r of K step s (r: row0 lo,
  // row0 + 8 lo, row0 hi, row0 + 8 hi; lo K 2c .. 2c + 1, hi K 2c + 8 ..).
  const auto widen = [&](int i, uint32_t(&f)[16]) {
    const uint32_t at = base + (i % kRsStages) * kRsSlot;
    if constexpr (kStageTest) {
      uint32_t words[2][8], scale_word[2];
#pragma unroll
      for (int q = 0; q < 2; ++q) {  // row0, row0 + 8
        const int row = row0 + 8 * q;
        LoadRaw128(at + kRsCodes + row * 32, *reinterpret_cast<uint32_t(*)[4]>(&words[q][0]));
        LoadRaw128(at + kRsCodes + row * 32 + 16, *reinterpret_cast<uint32_t(*)[4]>(&words[q][4]));
        scale_word[q] = LoadRaw32(at + kRsScales + row * 4);
      }
      const int j0 = (2 * i) & 3;  // K block b's scale: byte j0 + b of a row's word
      bool plain = !bad;
#pragma unroll
      for (int q = 0; q < 2; ++q) {
#pragma unroll
        for (int b = 0; b < 2; ++b) {
          plain = plain && Mxfp4ScaleMultipliesInBf16((scale_word[q] >> (8 * (j0 + b))) & 0xFFu);
        }
      }
      if (plain) {
#pragma unroll
        for (int q = 0; q < 2; ++q) {
#pragma unroll
          for (int b = 0; b < 2; ++b) {
            const uint32_t v = Mxfp4Bf16GatherQuadByte(&words[q][4 * b], c, prmt);
            const uint32_t scale = (scale_word[q] >> (8 * (j0 + b))) & 0xFFu;
            uint32_t o[4];
            Mxfp4ToBf16EightBf16Mul(v, (scale << 7) * 0x00010001u, tables, o);
#pragma unroll
            for (int j = 0; j < 4; ++j) f[Mxfp4Bf16FragmentRegister(b, j, q)] = o[j];
          }
        }
      } else {
#pragma unroll
        for (int q = 0; q < 2; ++q) {
#pragma unroll
          for (int b = 0; b < 2; ++b) {
            const uint32_t v = Mxfp4Bf16GatherQuadByte(&words[q][4 * b], c, prmt);
            const float s = bad ? __uint_as_float(0x7FC00000u)
                                : dense::fp8_gemm::ScaleOf(scale_word[q], j0 + b);
            uint32_t o[4];
            Mxfp4ToBf16Eight(v, s, o);
#pragma unroll
            for (int j = 0; j < 4; ++j) f[Mxfp4Bf16FragmentRegister(b, j, q)] = o[j];
          }
        }
      }
    } else {
#pragma unroll
      for (int q = 0; q < 2; ++q) {  // row0, row0 + 8
        const int row = row0 + 8 * q;
        uint32_t words[8];
        LoadRaw128(at + kRsCodes + row * 32, *reinterpret_cast<uint32_t(*)[4]>(&words[0]));
        LoadRaw128(at + kRsCodes + row * 32 + 16, *reinterpret_cast<uint32_t(*)[4]>(&words[4]));
        const uint32_t scale_word = LoadRaw32(at + kRsScales + row * 4);
#pragma unroll
        for (int b = 0; b < 2; ++b) {  // K blocks of 32: steps 2b, 2b + 1
          // Byte j of v: byte c of word 4b + j, i.e. K 32 b + 8 j + 2c, + 1.
          const uint32_t v = Mxfp4Bf16GatherQuadByte(&words[4 * b], c, prmt);
          uint32_t o[4];  // pair j: nibbles 2j, 2j + 1 of v
          WidenEight(v, scale_word, (2 * i + b) & 3, bad, tables, o);
#pragma unroll
          for (int j = 0; j < 4; ++j) f[Mxfp4Bf16FragmentRegister(b, j, q)] = o[j];
        }
      }
    }
  };
  // Keeps a fragment's registers holding its values up to here (the wgmma
  // that read them has retired), so the compiler reuses none of them earlier.
  const auto hold = [](uint32_t(&f)[16]) {
#pragma unroll
    for (int j = 0; j < 16; ++j) asm volatile("" : "+r"(f[j])::"memory");
  };
  // kSwiglu: the tile's gate and up sums (warpgroup 0's and 1's) staged in
  // the ring as [token][gate 0 - 63, up 0 - 63] (a padded row a token),
  // then h's FP8 form of the tile's kN tokens x 64 columns: unit u (8
  // columns) is token u / 8's columns 8 (u % 8) .., so four consecutive
  // lanes hold a 32-block, as ActQuantEight wants.
  // With a tail (kT: its kTail tokens' sums in dt), the tail's tokens follow
  // the tile's kN in the staging.
  uint8_t* const stage_mem = AlignSharedTo1024(smem_raw);
  const auto swiglu_epilogue = [&](auto n_rows, auto with_tail, const auto& d, const auto& dt) {
    constexpr int kN = decltype(n_rows)::value;
    constexpr bool kT = decltype(with_tail)::value;
    constexpr int kTokens = kN + (kT ? kTail : 0);
    constexpr int kStride = 2 * kSwiN + 4;  // floats a token's row
    static_assert((kRows + kTail) * kStride * 4 <= kRsStages * kRsSlot,
                  "the staged sums fit the ring");
    float* const staged = reinterpret_cast<float*>(stage_mem);
    // Both warpgroups' last stage read: the ring is free.
    asm volatile("bar.sync 1, %0;\n" ::"n"(kCons) : "memory");
#pragma unroll
    for (int ni = 0; ni < kN / 8; ++ni) {
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const dense::Fp8GemmAccCoord at = dense::Fp8GemmAccumulatorCoord(lane, r);
        staged[(ni * 8 + at.m) * kStride + warp * 16 + at.n] = d[4 * ni + r];
      }
    }
    if constexpr (kT) {
#pragma unroll
      for (int ni = 0; ni < kTail / 8; ++ni) {
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          const dense::Fp8GemmAccCoord at = dense::Fp8GemmAccumulatorCoord(lane, r);
          staged[(kN + ni * 8 + at.m) * kStride + warp * 16 + at.n] = dt[4 * ni + r];
        }
      }
    }
    asm volatile("bar.sync 1, %0;\n" ::"n"(kCons) : "memory");
#pragma unroll 1
    for (int u = tid; u < kTokens * (kSwiN / 8); u += kCons) {
      const int token = u / (kSwiN / 8), col0 = 8 * (u % (kSwiN / 8));
      SwigluFp8Unit<false>(a, staged + token * kStride, kSwiN, col0,
                           m0 + token < m && n0 + col0 < a.n, begin + m0 + token, n0);
    }
  };
  // The K loop and the stores over kN X rows (wgmma N), and with a tail
  // (kT) its kTail rows past them (a second wgmma of N kTail a K step).
  const auto consume = [&](auto n_rows, auto with_tail) {
    constexpr int kN = decltype(n_rows)::value;
    constexpr bool kT = decltype(with_tail)::value;
    static_assert(!kT || (kN == 256 && kTail > 0));
    constexpr int kDt = kT ? kTail / 2 : 1;
    float d[kN / 2];
    float dt[kDt];
#pragma unroll
    for (int r = 0; r < kN / 2; ++r) d[r] = 0.0f;
#pragma unroll
    for (int r = 0; r < kDt; ++r) dt[r] = 0.0f;
    uint32_t f0[16] = {}, f1[16] = {};
    MbarrierWait(full0, 0);
    widen(0, f0);
    // Stage i from `cur` (widened), then stage i + 1 into `next`.
    const auto step = [&](int i, uint32_t(&cur)[16], uint32_t(&next)[16]) {
      const int slot = i % kRsStages;
      const uint32_t x_lo = SwizzledKMajorDescriptorLo(base + slot * kRsSlot);
      WgmmaFence();
#pragma unroll
      for (int s = 0; s < 4; ++s) {
        const uint32_t(&frag)[4] = *reinterpret_cast<const uint32_t(*)[4]>(&cur[4 * s]);
        dense::bf16_gemm::WgmmaBf16Rs<kN>(frag, DescriptorOf(x_lo + ((32 * s) >> 4)), d);
        if constexpr (kT) {
          const uint32_t t_lo = SwizzledKMajorDescriptorLo(base + slot * kRsSlot + Slot::kXMain);
          dense::bf16_gemm::WgmmaBf16Rs<kTail>(frag, DescriptorOf(t_lo + ((32 * s) >> 4)), dt);
        }
      }
      WgmmaCommit();
      WgmmaWait(1);  // stage i - 1's group has retired: its slot and `next` are free
      hold(next);
      if (i > 0) {
        const int released = i - 1, slot_free = released % kRsStages;
        MbarrierArrive(empty0 + 8 * slot_free);
        if constexpr (kMulticast) {
          // The peer's producer refills this slot of ours too: one arrival a
          // warp once every lane's wgmma reading it has retired; none for a
          // stage no one refills (the peer may have left by then).
          if (released + kRsStages < stages) {
            __syncwarp();
            if (lane == 0) MbarrierArriveCluster(peer_empty0 + 8 * slot_free);
          }
        }
      }
      if (i + 1 < stages) {
        MbarrierWait(full0 + 8 * ((i + 1) % kRsStages), ((i + 1) / kRsStages) & 1);
        widen(i + 1, next);
      }
    };
    for (int i = 0; i < stages; i += 2) {  // stages is even (k % 128 == 0)
      step(i, f0, f1);
      step(i + 1, f1, f0);
    }
    WgmmaWait(0);
    hold(f0);
    hold(f1);
    if constexpr (kSwiglu) {
      swiglu_epilogue(n_rows, with_tail, d, dt);
    } else if constexpr (kN == 256) {  // two halves of 128 X rows, each in N 128's layout
      StoreOutputs<16>(a, *reinterpret_cast<float(*)[64]>(&d[0]), warp, lane, begin, m0, m, n0);
      StoreOutputs<16>(a, *reinterpret_cast<float(*)[64]>(&d[64]), warp, lane, begin, m0 + 128, m,
                       n0);
      if constexpr (kT) {
        StoreOutputs<kTail / 8>(a, dt, warp, lane, begin, m0 + kN, m, n0);
      }
    } else {
      StoreOutputs<kN / 8>(a, d, warp, lane, begin, m0, m, n0);
    }
  };
  using NoTail = std::false_type;
  if constexpr (kRows == 256) {
    if (m - m0 <= 128) {
      consume(std::integral_constant<int, 128>{}, NoTail{});
    } else if constexpr (kTail > 0) {
      if (tail) {
        consume(std::integral_constant<int, 256>{}, std::true_type{});
      } else {
        consume(std::integral_constant<int, 256>{}, NoTail{});
      }
    } else {
      consume(std::integral_constant<int, 256>{}, NoTail{});
    }
  } else if constexpr (kFitN) {
    static_assert(kRows == 128, "the fitted N are 16, 32, 64, 80 and 128");
    const int64_t here = m - m0;  // >= 1: the tile holds a row of the group
    if (here <= 16) {
      consume(std::integral_constant<int, 16>{}, NoTail{});
    } else if (here <= 32) {
      consume(std::integral_constant<int, 32>{}, NoTail{});
    } else if (here <= 64) {
      consume(std::integral_constant<int, 64>{}, NoTail{});
    } else if (here <= 80) {
      consume(std::integral_constant<int, 80>{}, NoTail{});
    } else {
      consume(std::integral_constant<int, 128>{}, NoTail{});
    }
  } else {
    consume(std::integral_constant<int, kRows>{}, NoTail{});
  }
  // The closing phase: neither CTA leaves while the other may still copy
  // into its slots (its multicast halves) or arrive on its barriers.
  if constexpr (kMulticast) {
    __syncwarp();
    ClusterSync();
  }
}

}  // namespace weir::kernels::cuda::moe::mxfp4_bf16

#endif  // WEIR_KERNELS_CUDA_MOE_MXFP4_BF16_RS_SM90_CUH_
