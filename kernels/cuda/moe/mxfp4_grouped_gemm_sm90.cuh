// kernels/cuda/moe/mxfp4_grouped_gemm_sm90.cuh — device code of the grouped
// MXFP4 expert GEMMs. No host dependencies. The contract and the arithmetic
// are in mxfp4_grouped_gemm_sm90.h, the layouts in mxfp4_grouped_gemm_params.h.
//
// Grid (column tiles, min(experts, rows) expert slots). A CTA finds the
// expert of its slot (ExpertOfSlot: the slot-th expert with rows) from the
// device offsets and returns at once when there is none, before touching any
// weight. Otherwise, per pass of block_m rows, it walks all of K in stages of
// 256 through a cp.async ring (packed W rows of 128 bytes, X rows of 2 x 128
// bytes, the 8 scale bytes of each row; a stage's copy address is one
// multiply-add of its index). Each warp owns a 16-row weight tile: per stage
// (the 8-row tiles first widen the stage's X to f16 once for the CTA, each
// warp a share) it decodes the scales it will read (its 16 weight rows and
// the tile's X rows, 8 K blocks each) to fp32 into its own shared scratch;
// then per 32 of K it reads its A fragment's packed codes (16 bits per
// register), looks up the high bytes of their f16 (a prmt table: every e2m1
// value is exact in f16, low byte zero) and interleaves them into the f16x2
// registers WidenA would make of the e4m3 codes Fp8BlockGemm's ldmatrix
// gives, and from there runs Fp8BlockGemm's own steps
// (dense/fp8_mma_sm90.cuh: WidenB, BlockSum on the tensor cores, fma with the
// two power-of-two scales). The only difference is that each weight row has
// its own scale. The profile that shaped this (ncu, H200): the integer/logic
// pipe was the bound (80% busy), not memory; the SASS counts of the K loop
// since are in README "Instruction diet 2".
#ifndef WEIR_KERNELS_CUDA_MOE_MXFP4_GROUPED_GEMM_SM90_CUH_
#define WEIR_KERNELS_CUDA_MOE_MXFP4_GROUPED_GEMM_SM90_CUH_

#include <cstdint>

#include "kernels/cuda/dense/act_quant_fp8.cuh"
#include "kernels/cuda/dense/fake_quant.cuh"
#include "kernels/cuda/dense/fp8_block_gemm_params.h"
#include "kernels/cuda/dense/fp8_mma_sm90.cuh"
#include "kernels/cuda/grid_dependency.cuh"
#include "kernels/cuda/moe/expert_ffn.cuh"
#include "kernels/cuda/moe/mxfp4_grouped_gemm_params.h"

namespace weir::kernels::cuda::moe::mxfp4_gemm {

namespace fp8 = ::weir::kernels::cuda::dense::fp8_gemm;

struct KernelArgs {
  const uint8_t* x;         // [rows, k]
  const uint8_t* x_scales;  // [rows, k / 32]
  const int64_t* offsets;   // [num_experts + 1]
  const uint8_t* const* w;  // plain: W; gated: w1
  const uint8_t* const* w_scales;
  const uint8_t* const* w_up;  // gated: w3 (else null)
  const uint8_t* const* w_up_scales;
  const float* route_weight;  // gated: [rows] or null
  float* y;                   // plain: [rows, n]
  uint8_t* h;                 // gated: [rows, n]
  uint8_t* h_scales;          // gated: [rows, n / 32]
  int64_t rows, n, k;         // n: output columns (gated: inter)
  int num_experts;            // entries of offsets - 1; grid.y may be fewer (ExpertOfSlot)
  float swiglu_limit;
  bool round_bf16;
};

__device__ __forceinline__ uint32_t Prmt(uint32_t a, uint32_t b, uint32_t selector) {
  uint32_t d;
  asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(selector));
  return d;
}

struct PrmtInstruction {
  __device__ __forceinline__ uint32_t operator()(uint32_t a, uint32_t b, uint32_t c) const {
    return Prmt(a, b, c);
  }
};

// The F16B registers of one (K block, 8-row X group) of a lane, as
// Mxfp4WidenedXOffset places them.
__device__ __forceinline__ void StoreF16B(uint32_t addr, const fp8::F16B& b) {
  asm volatile("st.shared.v4.b32 [%0], {%1,%2,%3,%4};\n" ::"r"(addr), "r"(b.lo[0]), "r"(b.lo[1]),
               "r"(b.hi[0]), "r"(b.hi[1])
               : "memory");
}

__device__ __forceinline__ fp8::F16B LoadF16B(uint32_t addr) {
  fp8::F16B b;
  asm volatile("ld.shared.v4.b32 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(b.lo[0]), "=r"(b.lo[1]), "=r"(b.hi[0]), "=r"(b.hi[1])
               : "r"(addr));
  return b;
}

__device__ __forceinline__ uint32_t LoadShared16(uint32_t addr) {
  uint32_t v;
  asm volatile("ld.shared.u16 %0, [%1];\n" : "=r"(v) : "r"(addr));
  return v;
}

// The wgmma form (kWgmma): sm_90a's asynchronous warpgroup MMA, the native
// FP8 tensor-core path (mma.sync e4m3 is two f16 products on Hopper). One
// m64nNk32 instruction over the tile's N X rows a K block (Wgmma<N>::RS), with
// Mxfp4WgmmaDepth blocks in flight: the warpgroup's four warps
// give their 16 weight rows each as e4m3 registers (the m16n8k32 A fragment
// layout, which wgmma's register A shares), X comes from the stage's
// swizzled tile by descriptor (dense/fp8_mma_sm90.cuh: the descriptor, the
// fences, the waits).
using fp8::DescriptorOf;
using fp8::FenceSharedForAsyncProxy;
using fp8::PinRegister;
using fp8::SwizzledKMajorDescriptorLo;
using fp8::WgmmaCommit;
using fp8::WgmmaFence;
using fp8::WgmmaWait;

// d = A B for one K block of 32 over the tile's kBm X rows: fp8::Wgmma<kBm>::RS
// (A the warpgroup's 64 weight rows, this warp's 16 in e4m3 registers; B the
// X rows by descriptor; each block's sum from zero, as BlockSum's).
using fp8::Wgmma;

using fp8::PromoteBlock;

// True when the expert's pointers can be streamed (cp.async needs 16-byte
// aligned code rows and 8-byte aligned scale rows; k % 256 keeps rows so).
__device__ __forceinline__ bool Usable(const uint8_t* codes, const uint8_t* scales) {
  return codes != nullptr && scales != nullptr && reinterpret_cast<uintptr_t>(codes) % 16 == 0 &&
         reinterpret_cast<uintptr_t>(scales) % 8 == 0;
}

// The expert that CTA row `slot` (blockIdx.y) serves: the slot-th expert, in
// index order, whose clamped row range [offsets[e], offsets[e + 1]) is not
// empty; -1 when fewer experts have rows. The grid has min(experts, rows)
// such slots (at most `rows` experts can have rows), so a decode step with a
// few rows over many experts starts a CTA per hit expert instead of one per
// expert. Every lane of every warp computes the same answer (a ballot per 32
// experts); all 32 lanes must be active.
__device__ __forceinline__ int ExpertOfSlot(const int64_t* offsets, int num_experts, int64_t rows,
                                            int slot) {
  const int lane = static_cast<int>(threadIdx.x & 31);
  int remaining = slot;
  for (int base = 0; base < num_experts; base += 32) {
    const int e = base + lane;
    bool has = false;
    if (e < num_experts) {
      const int64_t b = min(max(offsets[e], int64_t{0}), rows);
      const int64_t end = min(max(offsets[e + 1], int64_t{0}), rows);
      has = end > b;
    }
    const uint32_t mask = __ballot_sync(0xffffffffu, has);
    const int count = __popc(mask);
    if (remaining < count) {
      uint32_t m = mask;
      for (int i = 0; i < remaining; ++i) m &= m - 1;  // drop the lower set bits
      return base + __ffs(static_cast<int>(m)) - 1;
    }
    remaining -= count;
  }
  return -1;
}

// kWarps 16-row weight tiles per CTA (warp w: smem rows [16w, 16w + 16)).
// Plain: warp w is output columns n0 + 16w .. + 16 of W. Gated: warp w is
// columns n0 + 16 (w / 2) .. of w1 (w even) or w3 (w odd); a 32-column FP8
// block is the 4 warps 4b .. 4b + 3. block_m rows per pass, kBm / 8 mma tiles,
// of which only those holding rows run.
//
// kF16Wgmma (Mxfp4GemmMath::kWgmmaF16, with kWgmma false): the mma math's
// operands and K slots on wgmma m64nNk16 f16, X widened once a stage into
// the swizzled f16 tile (Mxfp4WgmmaF16XOffset): kMmaF16's bits.
//
// The body of both kernels below (after their GridDependencyPrologue).
template <int kWarps, int kBm, int kStages, bool kGated, bool kWgmma, bool kF16Wgmma>
__device__ __forceinline__ void GroupedBody(const KernelArgs& args) {
  constexpr int kThreads = kWarps * 32;
  constexpr int kNi = kBm / 8;
  constexpr int kWRows = 16 * kWarps;
  constexpr int kBlockN = kGated ? 8 * kWarps : 16 * kWarps;
  constexpr bool kAnyWgmma = kWgmma || kF16Wgmma;
  // The mma.sync 8-row tiles widen X once a stage for the CTA (Mxfp4WidensXOnce).
  constexpr bool kWidenX = Mxfp4WidensXOnce(kBm, kAnyWgmma);
  constexpr Mxfp4GroupedSmemLayout kL =
      Mxfp4GroupedLayout(kWarps, kBm, kStages, kWidenX, kF16Wgmma);
  constexpr int kWChunks = kWRows * 8 / kThreads;  // 16-byte W chunks per thread and stage
  constexpr int kXChunks = (kBm * 16 + kThreads - 1) / kThreads;
  constexpr int kScaleRows = (kWRows + kBm + kThreads - 1) / kThreads;
  static_assert(kBm % 8 == 0 && kStages >= 3, "tile shape");
  static_assert(!kGated || kWarps % 4 == 0, "a gated CTA covers whole 32-column FP8 blocks");
  static_assert(kWRows * 8 % kThreads == 0, "W chunk split");
  static_assert(!kAnyWgmma || kWarps % 4 == 0, "wgmma runs whole warpgroups");
  static_assert(!(kWgmma && kF16Wgmma), "one math");

  extern __shared__ __align__(128) uint8_t smem_raw[];
  // kWgmma: the base moved up to 1024 bytes (the launch adds the slack).
  uint8_t* const smem = kAnyWgmma ? fp8::AlignSharedTo1024(smem_raw) : smem_raw;

  const int expert =
      ExpertOfSlot(args.offsets, args.num_experts, args.rows, static_cast<int>(blockIdx.y));
  if (expert < 0) return;  // uniform: fewer experts have rows than the grid has slots
  const int64_t begin = min(max(args.offsets[expert], int64_t{0}), args.rows);
  const int64_t end = min(max(args.offsets[expert + 1], int64_t{0}), args.rows);
  if (end <= begin) return;  // uniform: nothing read, nothing written

  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kBlockN;
  const int64_t k = args.k;
  const int64_t row_bytes = k / 2;   // packed W row
  const int64_t scale_row = k / 32;  // scale bytes per row (multiple of 8)
  const int num_kt = static_cast<int>(k / kMxfp4GemmStageK);

  const uint8_t* const w0 = args.w[expert];
  const uint8_t* const s0 = args.w_scales[expert];
  const uint8_t* const w1 = kGated ? args.w_up[expert] : nullptr;
  const uint8_t* const s1 = kGated ? args.w_up_scales[expert] : nullptr;
  const bool missing = !Usable(w0, s0) || (kGated && !Usable(w1, s1));

  // Output column of W row `smem_row` of the CTA, and which weight it reads.
  auto column_of = [&](int smem_row) -> int64_t {
    return n0 + Mxfp4GroupedWRow(smem_row, kGated).column;
  };
  auto up_row = [&](int smem_row) { return Mxfp4GroupedWRow(smem_row, kGated).up; };

  // W copy sources, fixed for every pass (row pointers at K = 0).
  const uint8_t* w_src[kWChunks];
  uint32_t w_dst[kWChunks];
  bool w_ok[kWChunks];
  int w_step[kWChunks];  // bytes a stage: a row's 128 (0 for a column past n: zero-filled)
  if (!missing) {
#pragma unroll
    for (int i = 0; i < kWChunks; ++i) {
      const int c = tid + i * kThreads, row = c >> 3, chunk = c & 7;
      const int64_t col = column_of(row);
      w_ok[i] = col < args.n;
      const uint8_t* base = up_row(row) ? w1 : w0;
      w_src[i] = base + (w_ok[i] ? col * row_bytes : 0) + chunk * 16;
      w_step[i] = w_ok[i] ? kMxfp4GemmStageK / 2 : 0;
      w_dst[i] = dense::Fp8GemmSwizzledOffset(row, chunk);
    }
  }

  const uint32_t smem_base = fp8::SharedAddress(smem);
  // The e2m1 lookup tables (kWgmma: E2m1x4ToE4m3x4's; mma: E2m1x4ToF16High's),
  // read back from shared memory into registers for the whole kernel: as
  // constants (even behind an empty asm) ptxas keeps them in uniform
  // registers and moves them to a register before every prmt (8 moves a K
  // block in the SASS); a shared load's result stays in a register.
  uint32_t table_lo = 0, table_hi = 0, sign_table = 0;
  {
    if (tid < 3) {
      const uint32_t lo = kWgmma ? kE2m1ToE4m3Lo : kE2m1ToF16HighLo;
      const uint32_t hi = kWgmma ? kE2m1ToE4m3Hi : kE2m1ToF16HighHi;
      const uint32_t value = tid == 0 ? lo : tid == 1 ? hi : 0x80808080u;
      fp8::StoreSharedU32(smem_base + kL.tables + 4 * tid, value);
    }
    __syncthreads();
    table_lo = fp8::LoadShared32(smem_base + kL.tables);
    table_hi = fp8::LoadShared32(smem_base + kL.tables + 4);
    sign_table = fp8::LoadShared32(smem_base + kL.tables + 8);
  }
  const int col_group = kGated ? warp >> 1 : warp;  // 16 output columns
  const int64_t warp_col0 = n0 + 16 * col_group;

  for (int64_t r0 = begin; r0 < end; r0 += kBm) {
    const int tile_rows = static_cast<int>(min(end - r0, int64_t{kBm}));
    const int active_ni = (tile_rows + 7) >> 3;  // uniform over the CTA

    // This thread's copy sources of the pass at K = 0 and their advance per
    // stage (0 where the copy only zero-fills or is skipped), so a stage's
    // address is one multiply-add of kt: X chunks, then one scale row (W or
    // X; kScaleRows is 1 for every tile but the 2-warp ones).
    const uint8_t* x_src[kXChunks];
    bool x_ok[kXChunks];
#pragma unroll
    for (int i = 0; i < kXChunks; ++i) {
      const int c = tid + i * kThreads, row = c >> 4, chunk = c & 15;
      x_ok[i] = c < kBm * 16 && row < tile_rows;
      x_src[i] = x_ok[i] ? args.x + (r0 + row) * k + chunk * 16 : args.x;
    }
    const uint8_t* s_src[kScaleRows];
    uint32_t s_dst[kScaleRows];
    int s_step[kScaleRows];
    bool s_copy[kScaleRows], s_ok[kScaleRows];
#pragma unroll
    for (int i = 0; i < kScaleRows; ++i) {
      const int e = tid + i * kThreads;
      s_copy[i] = false;
      s_ok[i] = false;
      s_src[i] = args.x_scales;
      s_dst[i] = 0;
      s_step[i] = 0;
      if (e < kWRows) {
        const int64_t col = column_of(e);
        s_ok[i] = col < args.n;
        s_copy[i] = true;
        s_src[i] = (up_row(e) ? s1 : s0) + (s_ok[i] ? col * scale_row : 0);
        s_dst[i] = kL.w_scales + e * 8;
        s_step[i] = s_ok[i] ? 8 : 0;
      } else if (e < kWRows + kBm && e - kWRows < tile_rows) {
        const int row = e - kWRows;
        s_ok[i] = true;
        s_copy[i] = true;
        s_src[i] = args.x_scales + (r0 + row) * scale_row;
        s_dst[i] = kL.x_scales + row * 8;
        s_step[i] = 8;
      }
    }

    // Copies stage kt (codes and scale words of W and of the tile's X rows)
    // into ring slot `slot`. X rows past the tile are not copied: their
    // columns of the product are never stored.
    auto load_stage = [&](int kt, int slot) {
      const uint32_t w_slot = smem_base + kL.w_codes + slot * kL.w_codes_stride;
#pragma unroll
      for (int i = 0; i < kWChunks; ++i) {
        fp8::CpAsync16(w_slot + w_dst[i], w_src[i] + kt * w_step[i], w_ok[i]);
      }
      const uint32_t x_slot = smem_base + kL.x_codes + slot * kL.x_codes_stride;
#pragma unroll
      for (int i = 0; i < kXChunks; ++i) {
        const int c = tid + i * kThreads, row = c >> 4, chunk = c & 15;
        if (x_ok[i]) {
          fp8::CpAsync16(x_slot + Mxfp4GroupedXOffset(row, chunk, kBm),
                         x_src[i] + kt * kMxfp4GemmStageK, true);
        }
      }
#pragma unroll
      for (int i = 0; i < kScaleRows; ++i) {
        if (s_copy[i]) {
          // W and X scale parts of a slot share one stride pattern: the
          // offset of slot `slot` is the part's offset + slot * its stride.
          const bool w_part = tid + i * kThreads < kWRows;
          const uint32_t stride = w_part ? kL.w_scales_stride : kL.x_scales_stride;
          fp8::CpAsync8(smem_base + s_dst[i] + slot * stride, s_src[i] + kt * s_step[i], s_ok[i]);
        }
      }
    };

    float acc[kNi][4];
#pragma unroll
    for (int ni = 0; ni < kNi; ++ni) {
#pragma unroll
      for (int r = 0; r < 4; ++r) acc[ni][r] = 0.0f;
    }

    // Folds the 8 K blocks of ring slot `slot` into acc (Fp8BlockGemm's
    // compute, with per-row weight scales and packed weight codes).
    auto compute = [&](int slot) {
      const uint32_t w_base = smem_base + kL.w_codes + slot * kL.w_codes_stride;
      const uint32_t x_base = smem_base + kL.x_codes + slot * kL.x_codes_stride;
      const uint32_t ws_base = smem_base + kL.w_scales + slot * kL.w_scales_stride;
      const uint32_t xs_base = smem_base + kL.x_scales + slot * kL.x_scales_stride;
      const uint32_t sf_base = smem_base + kL.scale_floats + warp * kL.scale_floats_stride;
      const int row0 = 16 * warp;
      const int g = lane >> 2;
      [[maybe_unused]] const uint32_t xh_base = smem_base + kL.x_f16;
      // kWidenX: the stage's X B fragments, widened once for the CTA. Unit u
      // is K block u / pairs and the 8-row groups 2 (u % pairs) (+ 1): the
      // ldmatrix and WidenB the per-warp path below runs, spread over the
      // warps, stored where every warp reads them (Mxfp4WidenedXOffset).
      // Groups past the tile's rows are skipped (never multiplied).
      if constexpr (kWidenX) {
        constexpr int kPairs = (kNi + 1) / 2;
        constexpr int kUnits = kMxfp4GemmBlocksPerStage * kPairs;
        static_assert(kUnits % kWarps == 0, "every warp widens as many units");
#pragma unroll
        for (int it = 0; it < kUnits / kWarps; ++it) {
          const int u = warp + it * kWarps;
          const int j = u / kPairs, ni = 2 * (u % kPairs);
          if (ni < active_ni) {
            const uint32_t x_half = x_base + (j >> 2) * kBm * 128;
            if (ni + 1 < kNi) {
              const dense::Fp8GemmRowChunk src = dense::Fp8GemmBLdmatrixSource(lane, j & 3);
              uint32_t r0_, r1_, r2_, r3_;
              fp8::LdMatrixX4(x_half + dense::Fp8GemmSwizzledOffset(ni * 8 + src.row, src.chunk),
                              r0_, r1_, r2_, r3_);
              StoreF16B(xh_base + Mxfp4WidenedXOffset(j, ni, lane, kBm), fp8::WidenB(r0_, r1_));
              StoreF16B(xh_base + Mxfp4WidenedXOffset(j, ni + 1, lane, kBm), fp8::WidenB(r2_, r3_));
            } else {
              const dense::Fp8GemmRowChunk src = dense::Fp8GemmBLdmatrixSource(lane & 15, j & 3);
              uint32_t r0_, r1_;
              fp8::LdMatrixX2(x_half + dense::Fp8GemmSwizzledOffset(ni * 8 + src.row, src.chunk),
                              r0_, r1_);
              StoreF16B(xh_base + Mxfp4WidenedXOffset(j, ni, lane, kBm), fp8::WidenB(r0_, r1_));
            }
          }
        }
      }
      // The stage's scales this warp reads, decoded to fp32 once into its
      // scratch (4 bytes a lane: the warp's 16 weight rows x 8 blocks, then
      // the tile's X rows), instead of two decodes per weight row and X row
      // per K block in every lane.
      {
        const int r = lane >> 1, half = lane & 1;
        const uint32_t word = fp8::LoadShared32(ws_base + (row0 + r) * 8 + half * 4);
        float ws[4];
        fp8::ScalesOf(word, ws);  // ScaleOf's values, by a shift when all four are normal
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          fp8::StoreSharedF32(sf_base + 4 * Mxfp4ScaleFloatW(4 * half + i, r), ws[i]);
        }
#pragma unroll
        for (int e = lane; e < 2 * kBm; e += 32) {
          const int xr = e >> 1, xhalf = e & 1;
          float xs[4];
          fp8::ScalesOf(fp8::LoadShared32(xs_base + xr * 8 + xhalf * 4), xs);
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            fp8::StoreSharedF32(sf_base + 4 * Mxfp4ScaleFloatX(4 * xhalf + i, xr, kBm), xs[i]);
          }
        }
        if constexpr (kWidenX) {
          __syncthreads();  // every warp's share of the widened X is written
        } else {
          __syncwarp();
        }
      }
      // kF16Wgmma: the stage's held X rows widened to f16 once for the CTA
      // (16 codes a unit: their low code pairs to one chunk, their high pairs
      // to the next, Mxfp4WgmmaF16XOffset), then made visible to wgmma's
      // async proxy. The previous stage's wgmmas have all retired (every warp
      // waited for them before the ring's barrier).
      if constexpr (kF16Wgmma) {
        const uint32_t xw_base = smem_base + kL.x_f16;
#pragma unroll
        for (int u0 = 0; u0 < kBm * 16; u0 += kThreads) {
          const int u = u0 + tid, row = u >> 4, q = u & 15;
          if (u < kBm * 16 && row < tile_rows) {
            fp8::WidenCodesToF16Slots(x_base + Mxfp4GroupedXOffset(row, q, kBm),
                                      xw_base + Mxfp4WgmmaF16XOffset(row, 2 * q, kBm),
                                      xw_base + Mxfp4WgmmaF16XOffset(row, 2 * q + 1, kBm));
          }
        }
        FenceSharedForAsyncProxy();
        __syncthreads();
      }
      if constexpr (kAnyWgmma) {
        // X by descriptor: kWgmma the slot's e4m3 tile, kF16Wgmma the widened
        // f16 tile. A block and 8-row group add their byte offset / 16 to its
        // address field (no carry: shared memory < 256 KB). (Offsets added to
        // the 64-bit value: with the low word advanced instead ptxas made this
        // loop 20 instructions a stage longer.)
        const uint64_t x_desc =
            DescriptorOf(SwizzledKMajorDescriptorLo(kWgmma ? x_base : smem_base + kL.x_f16));
        constexpr int kP = kBm / 2;  // p[4 ni + r]: 8-row group ni (Wgmma's layout)
        // A registers a block: kWgmma's 4 of e4m3 codes; kF16Wgmma's 8, the
        // mma path's f16 fragment (K 0-15 in 0-3, K 16-31 in 4-7).
        constexpr int kARegs = kWgmma ? 4 : 8;
        // This warp's A registers of block j (its 16 weight rows), complete
        // before the fence that precedes their wgmma (a lookup moved past it
        // would make ptxas serialize the wgmma).
        auto make_a = [&](int j, uint32_t(&a)[kARegs]) {
          if constexpr (kWgmma) {
#pragma unroll
            for (int q = 0; q < 4; ++q) {
              a[q] = E2m1x4Lookup(LoadShared16(w_base + Mxfp4PackedAOffset(row0, lane, j, q)),
                                  table_lo, table_hi, PrmtInstruction{}, sign_table);
            }
          } else {
            // Packed codes -> f16 high bytes by the prmt table -> WidenA's slots.
            asm volatile("" : "+r"(table_lo));
            uint32_t hi8[4];
#pragma unroll
            for (int q = 0; q < 4; ++q) {
              hi8[q] = E2m1x4Lookup(LoadShared16(w_base + Mxfp4PackedAOffset(row0, lane, j, q)),
                                    table_lo, table_hi, PrmtInstruction{}, sign_table);
            }
            a[0] = Prmt(hi8[0], 0u, kF16x2Of01);
            a[1] = Prmt(hi8[1], 0u, kF16x2Of01);
            a[2] = Prmt(hi8[0], 0u, kF16x2Of23);
            a[3] = Prmt(hi8[1], 0u, kF16x2Of23);
            a[4] = Prmt(hi8[2], 0u, kF16x2Of01);
            a[5] = Prmt(hi8[3], 0u, kF16x2Of01);
            a[6] = Prmt(hi8[2], 0u, kF16x2Of23);
            a[7] = Prmt(hi8[3], 0u, kF16x2Of23);
          }
#pragma unroll
          for (int q = 0; q < kARegs; ++q) PinRegister(a[q]);
        };
        // Every X row of the tile, held or not (rows past the tile sum stale
        // values into columns never stored): kWgmma one m64nNk32 over kBm
        // rows; kF16Wgmma K 0-15 from zero, then 16-31 added (block j's halves
        // start (j / 2) column atoms and (j % 2) 64 + 32 h bytes in).
        auto issue = [&](int j, const uint32_t(&a)[kARegs], float(&d)[kP]) {
          if constexpr (kWgmma) {
            const int x_block = (j >> 2) * kBm * 128 + (j & 3) * 32;
            Wgmma<kBm>::RS(a, x_desc + static_cast<uint64_t>(x_block >> 4), d);
          } else {
            const int at = (j >> 1) * kBm * 128 + (j & 1) * 64;
            const uint32_t lo[4] = {a[0], a[1], a[2], a[3]};
            const uint32_t hi[4] = {a[4], a[5], a[6], a[7]};
            fp8::WgmmaF16<kBm>::RSZero(lo, x_desc + static_cast<uint64_t>(at >> 4), d);
            fp8::WgmmaF16<kBm>::RS(hi, x_desc + static_cast<uint64_t>((at + 32) >> 4), d, true);
          }
        };
        auto fold = [&](int j, float(&d)[kP]) {
          const float2 wf = fp8::LoadSharedF32x2(sf_base + 4 * Mxfp4ScaleFloatW(j, g));
#pragma unroll
          for (int ni = 0; ni < kNi; ++ni) {
            if (ni < active_ni) {
              float pn[4];
#pragma unroll
              for (int r = 0; r < 4; ++r) {
                PinRegister(d[4 * ni + r]);
                pn[r] = d[4 * ni + r];
              }
              const float2 xf = fp8::LoadSharedF32x2(
                  sf_base +
                  4 * Mxfp4ScaleFloatX(j, ni * 8 + dense::Fp8GemmAccumulatorCoord(lane, 0).m, kBm));
              PromoteBlock(acc[ni], pn, wf, xf);
            }
          }
        };
        // Mxfp4WgmmaDepth blocks in flight: block j + depth's A registers are
        // made and its wgmma issued as soon as block j is folded.
        using ARegs = uint32_t[kARegs];
        fp8::WgmmaBlocksInFlight<Mxfp4WgmmaDepth(kBm), kMxfp4GemmBlocksPerStage, kP, ARegs>(
            make_a, issue, fold, [](ARegs& a) {
#pragma unroll
              for (int q = 0; q < kARegs; ++q) PinRegister(a[q]);
            });
      } else {
#pragma unroll
        for (int j = 0; j < kMxfp4GemmBlocksPerStage; ++j) {
          const int jj = j & 3;
          const uint32_t x_half = x_base + (j >> 2) * kBm * 128;
          fp8::F16B b[kNi];
          if constexpr (kWidenX) {
#pragma unroll
            for (int ni = 0; ni < kNi; ++ni) {
              if (ni < active_ni) b[ni] = LoadF16B(xh_base + Mxfp4WidenedXOffset(j, ni, lane, kBm));
            }
          }
#pragma unroll
          for (int ni = 0; !kWidenX && ni + 1 < kNi; ni += 2) {
            if (ni < active_ni) {
              const dense::Fp8GemmRowChunk src = dense::Fp8GemmBLdmatrixSource(lane, jj);
              uint32_t r0_, r1_, r2_, r3_;
              fp8::LdMatrixX4(x_half + dense::Fp8GemmSwizzledOffset(ni * 8 + src.row, src.chunk),
                              r0_, r1_, r2_, r3_);
              b[ni] = fp8::WidenB(r0_, r1_);
              b[ni + 1] = fp8::WidenB(r2_, r3_);
            }
          }
          if constexpr (!kWidenX && kNi % 2 == 1) {
            const dense::Fp8GemmRowChunk src = dense::Fp8GemmBLdmatrixSource(lane & 15, jj);
            uint32_t r0_, r1_;
            fp8::LdMatrixX2(
                x_half + dense::Fp8GemmSwizzledOffset((kNi - 1) * 8 + src.row, src.chunk), r0_,
                r1_);
            b[kNi - 1] = fp8::WidenB(r0_, r1_);
          }
          // The A fragment: packed codes -> the high bytes of their f16 (a prmt
          // table) -> f16x2 registers, the values WidenA makes of the e4m3
          // registers ldmatrix gives Fp8BlockGemm.
          uint32_t hi8[4];
          // ptxas kept table_lo in a uniform register and copied it to a
          // register before each of the 4 lookups of a block (seen in the
          // SASS); pinned here, once a block.
          asm volatile("" : "+r"(table_lo));
#pragma unroll
          for (int q = 0; q < 4; ++q) {
            // E2m1x4ToF16High, with its tables in registers.
            hi8[q] = E2m1x4Lookup(LoadShared16(w_base + Mxfp4PackedAOffset(row0, lane, j, q)),
                                  table_lo, table_hi, PrmtInstruction{}, sign_table);
          }
          const fp8::F16A a = {{Prmt(hi8[0], 0u, kF16x2Of01), Prmt(hi8[1], 0u, kF16x2Of01),
                                Prmt(hi8[0], 0u, kF16x2Of23), Prmt(hi8[1], 0u, kF16x2Of23)},
                               {Prmt(hi8[2], 0u, kF16x2Of01), Prmt(hi8[3], 0u, kF16x2Of01),
                                Prmt(hi8[2], 0u, kF16x2Of23), Prmt(hi8[3], 0u, kF16x2Of23)}};
          // Weight scales of rows g and g + 8 (one 8-byte load).
          const float2 wf = fp8::LoadSharedF32x2(sf_base + 4 * Mxfp4ScaleFloatW(j, g));
#pragma unroll
          for (int ni = 0; ni < kNi; ++ni) {
            if (ni < active_ni) {
              // X scales of the lane's rows 2t and 2t + 1 of this mma tile.
              const float2 xf = fp8::LoadSharedF32x2(
                  sf_base +
                  4 * Mxfp4ScaleFloatX(j, ni * 8 + dense::Fp8GemmAccumulatorCoord(lane, 0).m, kBm));
              float p[4];
              fp8::BlockSum(a, b[ni], p);
              PromoteBlock(acc[ni], p, wf, xf);
            }
          }
        }
      }
    };

    if (!missing) {
#pragma unroll
      for (int s = 0; s < kStages - 1; ++s) {
        if (s < num_kt) load_stage(s, s);
        fp8::CpAsyncCommit();
      }
      int slot = 0;
      int next_slot = kStages - 1;
      for (int kt = 0; kt < num_kt; ++kt) {
        fp8::CpAsyncWait<kStages - 2>();  // this thread's copies of stage kt have landed
        if constexpr (kWgmma) FenceSharedForAsyncProxy();
        __syncthreads();  // everyone's have; the slot of stage kt - 1 is free
        const int next = kt + kStages - 1;
        if (next < num_kt) load_stage(next, next_slot);
        fp8::CpAsyncCommit();
        compute(slot);
        slot = slot + 1 == kStages ? 0 : slot + 1;
        next_slot = next_slot + 1 == kStages ? 0 : next_slot + 1;
      }
      fp8::CpAsyncWait<0>();
    }
    __syncthreads();  // the ring is free: the epilogue may use it

    const float nan = __uint_as_float(0x7FC00000u);
    if constexpr (!kGated) {
#pragma unroll
      for (int ni = 0; ni < kNi; ++ni) {
        if (ni >= active_ni) continue;
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          const dense::Fp8GemmAccCoord c = dense::Fp8GemmAccumulatorCoord(lane, r);
          const int64_t col = warp_col0 + c.n;
          const int row = ni * 8 + c.m;
          if (col < args.n && row < tile_rows) {
            float v = missing ? nan : acc[ni][r];
            if (args.round_bf16) v = RoundToBf16(v);
            args.y[(r0 + row) * args.n + col] = v;
          }
        }
      }
    } else {
      // w3 warps hand their sums (u) to the w1 warps of the same columns, in
      // accumulator order; then the w1 warps run SwiGLU and quantize.
      float* const xchg = reinterpret_cast<float*>(smem);        // [kWarps/2][kNi][4][32]
      float* const s_amax = xchg + (kWarps / 2) * kNi * 4 * 32;  // [kWarps/2][kBm]
      int* const s_bad = reinterpret_cast<int*>(s_amax + (kWarps / 2) * kBm);
      const bool up_warp = (warp & 1) != 0;
      if (up_warp) {
#pragma unroll
        for (int ni = 0; ni < kNi; ++ni) {
#pragma unroll
          for (int r = 0; r < 4; ++r)
            xchg[((col_group * kNi + ni) * 4 + r) * 32 + lane] = acc[ni][r];
        }
      }
      __syncthreads();
      float hv[kNi][4];
      if (!up_warp) {
        const bool has_rw = args.route_weight != nullptr;
#pragma unroll
        for (int ni = 0; ni < kNi; ++ni) {
          if (ni >= active_ni) continue;
          float amax[2] = {0.0f, 0.0f};
          int bad[2] = {0, 0};
#pragma unroll
          for (int r = 0; r < 4; ++r) {
            const int row = ni * 8 + dense::Fp8GemmAccumulatorCoord(lane, r).m;
            const float u = xchg[((col_group * kNi + ni) * 4 + r) * 32 + lane];
            const float rw = has_rw && row < tile_rows ? args.route_weight[r0 + row] : 1.0f;
            const float h =
                missing ? nan
                        : SwigluOut(acc[ni][r], u, rw, has_rw, args.swiglu_limit, args.round_bf16);
            hv[ni][r] = h;
            amax[r & 1] = fmaxf(amax[r & 1], fabsf(h));
            bad[r & 1] |= isfinite(h) ? 0 : 1;
          }
          // The 16 columns of a row sit in the 8 lanes with the same lane % 4.
#pragma unroll
          for (int offset = 4; offset < 32; offset *= 2) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              amax[h] = fmaxf(amax[h], __shfl_xor_sync(0xffffffffu, amax[h], offset));
              bad[h] |= __shfl_xor_sync(0xffffffffu, bad[h], offset);
            }
          }
          if (lane < 4) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              s_amax[col_group * kBm + ni * 8 + 2 * lane + h] = amax[h];
              s_bad[col_group * kBm + ni * 8 + 2 * lane + h] = bad[h];
            }
          }
        }
      }
      __syncthreads();
      if (!up_warp) {
        const int partner = col_group ^ 1;  // the other 16 columns of the FP8 block
#pragma unroll
        for (int ni = 0; ni < kNi; ++ni) {
          if (ni >= active_ni) continue;
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int row = ni * 8 + 2 * (lane & 3) + h;
            const float amax = fmaxf(s_amax[col_group * kBm + row], s_amax[partner * kBm + row]);
            const bool bad = (s_bad[col_group * kBm + row] | s_bad[partner * kBm + row]) != 0;
            const uint32_t scale_code = bad ? 0xFFu : dense::Fp8ActScaleCode(amax);
            const float s = E8m0ToFloat(scale_code);
            if (row < tile_rows) {
#pragma unroll
              for (int r = h; r < 4; r += 2) {
                const int64_t col = warp_col0 + dense::Fp8GemmAccumulatorCoord(lane, r).n;
                if (col < args.n) {
                  args.h[(r0 + row) * args.n + col] =
                      static_cast<uint8_t>(bad ? 0x7Fu : dense::Fp8ActCode(hv[ni][r], s));
                }
              }
              if ((col_group & 1) == 0 && lane < 4 && warp_col0 < args.n) {
                args.h_scales[(r0 + row) * (args.n / 32) + warp_col0 / 32] =
                    static_cast<uint8_t>(scale_code);
              }
            }
          }
        }
      }
      __syncthreads();  // the next pass reuses the exchange memory
    }
  }
}

// The kernel of a tile, with ptxas's own register choice.
template <int kWarps, int kBm, int kStages, bool kGated, bool kWgmma, bool kF16Wgmma = false>
__global__ void __launch_bounds__(kWarps * 32)
    Mxfp4GroupedKernel(const __grid_constant__ KernelArgs args) {
  GridDependencyPrologue();
  GroupedBody<kWarps, kBm, kStages, kGated, kWgmma, kF16Wgmma>(args);
}

// ... and of a tile that Mxfp4MinBlocks bounds (kMinBlocks CTAs an SM by
// registers). Two kernels because a second __launch_bounds__ argument of 1 is
// not the same as none: ptxas then gave the 16-row tiles 207 registers
// instead of 128.
template <int kWarps, int kBm, int kStages, bool kGated, bool kWgmma, bool kF16Wgmma,
          int kMinBlocks>
__global__ void __launch_bounds__(kWarps * 32, kMinBlocks)
    Mxfp4GroupedKernelBounded(const __grid_constant__ KernelArgs args) {
  GridDependencyPrologue();
  GroupedBody<kWarps, kBm, kStages, kGated, kWgmma, kF16Wgmma>(args);
}

}  // namespace weir::kernels::cuda::moe::mxfp4_gemm

#endif  // WEIR_KERNELS_CUDA_MOE_MXFP4_GROUPED_GEMM_SM90_CUH_
