// kernels/cuda/dense/bf16_gemm_sm90.cuh — device code of Bf16Gemm. No host
// dependencies. The contract and the arithmetic are in bf16_gemm_sm90.h; the
// shared-memory layout (swizzled 128-byte stage rows) and the ldmatrix /
// accumulator mappings are Fp8BlockGemm's (fp8_block_gemm_params.h).
//
// One CTA owns a block_n x block_m tile of Y^T (W rows x X rows) of one
// group and walks all of K in stages of 64 elements: cp.async copies the W
// and X tiles into a ring of `stages` shared buffers, ldmatrix loads the
// fragments (a 16-byte chunk is 8 bf16 of K, so one m16n8k16 step reads
// chunks 2j and 2j + 1, which is the FP8 kernel's chunk pair of K block j),
// and each warp accumulates m16n8k16 bf16 mma into fp32 in K order.
#ifndef WEIR_KERNELS_CUDA_DENSE_BF16_GEMM_SM90_CUH_
#define WEIR_KERNELS_CUDA_DENSE_BF16_GEMM_SM90_CUH_

#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/cuda/dense/bf16_gemm_params.h"
#include "kernels/cuda/dense/fp8_block_gemm_params.h"
#include "kernels/cuda/dense/fp8_mma_sm90.cuh"
#include "kernels/cuda/grid_dependency.cuh"
#include "kernels/cuda/mma_bf16.cuh"
#include "kernels/cuda/rounding.cuh"

namespace weir::kernels::cuda::dense {
namespace bf16_gemm {

struct KernelArgs {
  const uint16_t* x;  // [groups][m, k]
  const uint16_t* w;  // [groups][n, k] (null with w_codes)
  void* y;            // [groups][m, n] (rows ldy apart), float or bf16
  int64_t m, n, k;
  int64_t x_stride, w_stride, y_stride;  // per group, elements (resolved)
  int64_t ldy;                           // y's row stride (resolved: n when packed)
  bool bf16_out;
  bool round_f32;  // fp32 y rounded to bf16 (kF32RoundedBf16)
  int k_splits;    // > 1: fp32 partials into `partial`, SplitReduceKernel sums them
  float* partial;  // [groups][k_splits][m, n]
  const uint8_t* w_codes;   // [groups][n, k] e4m3, w_stride bytes apart (instead of w)
  const uint8_t* w_scales;  // [groups][ceil(n / 32), k / 32] UE8M0, w_scales_stride apart
  int64_t w_scales_stride;
  const int32_t* row_role;  // [m] or null: y's rows r with row_role[r] == role only
  int role;
};

// The X rows of `role` among those ForEachOutput gives `lane` over kNi steps
// of 8 rows from m_base: rows m_base + d, d = 8 ni + c.m, where c.m
// (Fp8GemmAccumulatorCoord) is 2 (lane & 3) for r = 0, 2 and one more for
// r = 1, 3. Bit 2 ni + (d & 1) is set when row_role of that row is `role`
// (RowHasRole reads it); every bit without row_role. Each row's role is read
// once, rows past m not at all.
template <int kNi>
__device__ __forceinline__ uint32_t RowsOfRole(const int32_t* row_role, int role, int64_t m_base,
                                               int64_t m, int lane) {
  static_assert(2 * kNi <= 32, "a bit a row");
  if (row_role == nullptr) return ~0u;
  uint32_t rows = 0;
#pragma unroll
  for (int ni = 0; ni < kNi; ++ni) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int64_t gm = m_base + ni * 8 + Fp8GemmAccumulatorCoord(lane, r).m;
      if (gm < m && row_role[gm] == role) rows |= 1u << (2 * ni + r);
    }
  }
  return rows;
}

// Whether row m_base + d is of the role in RowsOfRole's `rows`.
__device__ __forceinline__ bool RowHasRole(uint32_t rows, int64_t d) {
  const int i = static_cast<int>(d);
  return ((rows >> (2 * (i >> 3) + (i & 1))) & 1u) != 0;
}

// acc += A B over one 16-element K step (bf16 operands, fp32 accumulation;
// kernels/cuda/mma_bf16.cuh).
__device__ __forceinline__ void MmaBf16(const uint32_t (&a)[4], uint32_t b0, uint32_t b1,
                                        float (&d)[4]) {
  MmaBf16M16N8K16(d, a, b0, b1);
}

template <int kBn, int kBm, int kWarpsN, int kWarpsM, int kStages, bool kW8 = false>
__global__ void __launch_bounds__(kWarpsN* kWarpsM * 32)
    Bf16GemmKernel(const __grid_constant__ KernelArgs args) {
  GridDependencyPrologue();
  using fp8_gemm::CpAsyncCommit;
  using fp8_gemm::CpAsyncWait;
  using fp8_gemm::ForEachOutput;
  using fp8_gemm::LdMatrixX4;
  using fp8_gemm::LoadXFragments;
  using fp8_gemm::SharedAddress;
  using fp8_gemm::StageRowCopies;
  using fp8_gemm::ZeroAccumulators;
  constexpr int kThreads = kWarpsN * kWarpsM * 32;
  constexpr int kWarpN = kBn / kWarpsN;
  constexpr int kWarpM = kBm / kWarpsM;
  constexpr int kMi = kWarpN / 16;
  constexpr int kNi = kWarpM / 8;
  constexpr int kStageBytes = kFp8GemmStageK;  // 128 bytes = 64 bf16 of K
  constexpr int kStepsPerStage = kBf16GemmStageK / 16;  // 4
  constexpr int kWTile = kBn * kStageBytes;
  constexpr int kXTile = kBm * kStageBytes;
  constexpr int kWChunks = kBn * 8 / kThreads;
  constexpr int kXChunks = (kBm * 8 + kThreads - 1) / kThreads;  // 8 X rows: half the threads
  static_assert(kBn % 16 == 0 && kWarpN % 16 == 0 && kWarpM % 8 == 0, "tile shape");
  static_assert(kBn * 8 % kThreads == 0 && (kBm * 8 % kThreads == 0 || kBm * 8 < kThreads),
                "chunk split");
  static_assert(kStages >= 2, "pipeline");

  extern __shared__ __align__(128) uint8_t smem[];
  uint8_t* const w_tiles = smem;
  // kW8: one W tile (widened right before each stage's compute, after a
  // barrier that every compute of the stage before has passed).
  constexpr int kWSlots = kW8 ? 1 : kStages;
  uint8_t* const x_tiles = w_tiles + kWSlots * kWTile;
  // kW8: the stage's W codes, [kBn][64] bytes a ring slot, widened into the
  // W tile (bf16, swizzled as cp.async would have put w) before use.
  constexpr int kCodeRow = kBf16GemmStageK;  // 64 codes of K
  constexpr int kCodeTile = kBn * kCodeRow;
  uint8_t* const code_tiles = x_tiles + kStages * kXTile;
  // kW8: the scale bytes of the CTA's W rows over its split's K blocks,
  // loaded once ([row tiles][2 num_kt]; the launch adds them to the shared
  // memory): a global load a chunk in every stage's widening cost more than
  // the bytes the codes save (H100, 2026-12-06).
  uint8_t* const scale_tile = code_tiles + kStages * kCodeTile;
  constexpr int kScaleRowTiles = kBn < 32 ? 1 : kBn / 32;

  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int warp_n0 = (warp % kWarpsN) * kWarpN;
  const int warp_m0 = (warp / kWarpsN) * kWarpM;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kBn;
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * kBm;
  // blockIdx.z = group x k_splits + split.
  const int64_t g = blockIdx.z / args.k_splits;
  const int split = static_cast<int>(blockIdx.z % args.k_splits);
  const uint16_t* const xg = args.x + g * args.x_stride;
  const uint16_t* const wg = args.w + g * args.w_stride;
  const int64_t k = args.k;
  const int64_t k_bytes = k * 2;
  const int num_steps = static_cast<int>(k / 16);  // whole 16-element steps
  const bool tail = k % 16 != 0;                   // a last half step (k % 16 == 8)
  const int total_steps = num_steps + (tail ? 1 : 0);
  const int all_kt = (total_steps + kStepsPerStage - 1) / kStepsPerStage;
  // This split's stages [kt0, kt0 + num_kt) (all of them without a split).
  const int kt0 = static_cast<int>(int64_t{split} * all_kt / args.k_splits);
  const int num_kt = static_cast<int>(int64_t{split + 1} * all_kt / args.k_splits) - kt0;

  const StageRowCopies<kWChunks, kThreads> w_rows(reinterpret_cast<const uint8_t*>(wg), k_bytes, n0,
                                                  args.n, tid);
  const uint8_t* const wcg = kW8 ? args.w_codes + g * args.w_stride : nullptr;
  const uint8_t* const wsg = kW8 ? args.w_scales + g * args.w_scales_stride : nullptr;
  const int64_t scale_cols = k / 32;
  const int cta_scale_cols = 2 * num_kt;  // two K blocks of 32 a stage
  if constexpr (kW8) {
    const int64_t first_tile = n0 >> 5;
    for (int i = tid; i < kScaleRowTiles * cta_scale_cols; i += kThreads) {
      const int rt = i / cta_scale_cols, c = i % cta_scale_cols;
      const int64_t row_tile = first_tile + rt, kb = int64_t{kt0} * 2 + c;
      scale_tile[i] = row_tile * 32 < args.n && kb < scale_cols ? wsg[row_tile * scale_cols + kb]
                                                                : static_cast<uint8_t>(0);
    }
  }
  const StageRowCopies<kXChunks, kThreads, kBm> x_rows(reinterpret_cast<const uint8_t*>(xg),
                                                       k_bytes, m0, args.m, tid);

  // Stage kt's tiles into ring slot `slot`; rows past n / m and K past k are
  // zero-filled (so a half step's upper 8 elements multiply zeros).
  auto load_tiles = [&](int kt, int slot) {
    const int64_t base = static_cast<int64_t>(kt0 + kt) * kStageBytes;
    const int64_t left = k_bytes - base;
    if constexpr (kW8) {  // 64 codes a row: four 16-byte copies
      const int64_t kb = static_cast<int64_t>(kt0 + kt) * kBf16GemmStageK;
      const uint32_t dst = SharedAddress(code_tiles) + slot * kCodeTile;
      for (int i = tid; i < kBn * 4; i += kThreads) {
        const int row = i >> 2, q = i & 3;
        const int64_t gn = n0 + row, kk = kb + q * 16;
        const bool valid = gn < args.n && kk < k;
        fp8_gemm::CpAsync16(dst + row * kCodeRow + q * 16, valid ? wcg + gn * k + kk : wcg, valid);
      }
    } else {
      w_rows.Copy(SharedAddress(w_tiles) + slot * kWTile, base, left);
    }
    x_rows.Copy(SharedAddress(x_tiles) + slot * kXTile, base, left);
  };
  // kW8: stage kt's codes (landed) -> its W tile slot as bf16 (zeros past n
  // and k, as the copies of w zero-fill them).
  auto widen = [&](int kt, int slot) {
    const int64_t kb = static_cast<int64_t>(kt0 + kt) * kBf16GemmStageK;
    const uint32_t src = SharedAddress(code_tiles) + slot * kCodeTile;
    const uint32_t dst = SharedAddress(w_tiles);
    for (int i = tid; i < kBn * 8; i += kThreads) {
      const int row = i >> 3, chunk = i & 7;
      const int64_t gn = n0 + row, kk = kb + chunk * 8;
      uint32_t v[4] = {0u, 0u, 0u, 0u};
      if (gn < args.n && kk < k) {
        uint32_t lo, hi;
        asm volatile("ld.shared.v2.b32 {%0,%1}, [%2];\n"
                     : "=r"(lo), "=r"(hi)
                     : "r"(src + row * kCodeRow + chunk * 8));
        const int rt = static_cast<int>((gn >> 5) - (n0 >> 5));
        fp8_gemm::Fp8ToBf16Eight(lo, hi, scale_tile[rt * cta_scale_cols + (kk >> 5) - 2 * kt0], v);
      }
      asm volatile(
          "st.shared.v4.b32 [%0], {%1,%2,%3,%4};\n" ::"r"(dst + Fp8GemmSwizzledOffset(row, chunk)),
          "r"(v[0]), "r"(v[1]), "r"(v[2]), "r"(v[3])
          : "memory");
    }
  };

  float acc[kMi][kNi][4];
  ZeroAccumulators(acc);

  auto compute = [&](int slot, int steps) {
    const uint32_t w_base = SharedAddress(w_tiles) + (kW8 ? 0 : slot * kWTile);
    const uint32_t x_base = SharedAddress(x_tiles) + slot * kXTile;
#pragma unroll
    for (int j = 0; j < kStepsPerStage; ++j) {
      if (j >= steps) break;  // uniform over the CTA: only in the last stage
      uint32_t b[kNi][2];
      LoadXFragments<kNi>(x_base, warp_m0, lane, j, b);
#pragma unroll
      for (int mi = 0; mi < kMi; ++mi) {
        uint32_t a[4];
        const Fp8GemmRowChunk src = Fp8GemmALdmatrixSource(lane, j);
        LdMatrixX4(w_base + Fp8GemmSwizzledOffset(warp_n0 + mi * 16 + src.row, src.chunk), a[0],
                   a[1], a[2], a[3]);
#pragma unroll
        for (int ni = 0; ni < kNi; ++ni) MmaBf16(a, b[ni][0], b[ni][1], acc[mi][ni]);
      }
    }
  };

#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < num_kt) load_tiles(s, s);
    CpAsyncCommit();
  }
  int slot = 0;
  int next_slot = kStages - 1;
  for (int kt = 0; kt < num_kt; ++kt) {
    CpAsyncWait<kStages - 2>();
    __syncthreads();
    const int next = kt + kStages - 1;
    if (next < num_kt) load_tiles(next, next_slot);
    CpAsyncCommit();
    if constexpr (kW8) {
      widen(kt, slot);
      __syncthreads();
    }
    compute(slot, min(kStepsPerStage, total_steps - (kt0 + kt) * kStepsPerStage));
    slot = slot + 1 == kStages ? 0 : slot + 1;
    next_slot = next_slot + 1 == kStages ? 0 : next_slot + 1;
  }

  if (args.k_splits > 1) {  // this split's partial, unrounded
    float* const part = args.partial + (g * args.k_splits + split) * args.m * args.n;
    ForEachOutput(acc, lane, n0 + warp_n0, m0 + warp_m0, args.n, args.m,
                  [&](int64_t gm, int64_t gn, float v) { part[gm * args.n + gn] = v; });
    return;
  }
  const int64_t y_off = g * args.y_stride;
  const uint32_t rows = RowsOfRole<kNi>(args.row_role, args.role, m0 + warp_m0, args.m, lane);
  ForEachOutput(
      acc, lane, n0 + warp_n0, m0 + warp_m0, args.n, args.m, [&](int64_t gm, int64_t gn, float v) {
        if (!RowHasRole(rows, gm - (m0 + warp_m0))) return;
        if (args.bf16_out) {
          static_cast<__nv_bfloat16*>(args.y)[y_off + gm * args.ldy + gn] = __float2bfloat16_rn(v);
        } else {
          static_cast<float*>(args.y)[y_off + gm * args.ldy + gn] =
              args.round_f32 ? RoundToBf16(v) : v;
        }
      });
}

}  // namespace bf16_gemm
}  // namespace weir::kernels::cuda::dense

#endif  // WEIR_KERNELS_CUDA_DENSE_BF16_GEMM_SM90_CUH_
