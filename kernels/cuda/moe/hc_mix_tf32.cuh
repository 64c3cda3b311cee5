// kernels/cuda/moe/hc_mix_tf32.cuh — device code of HcMixTf32
// (hc_mix_split.h states the arithmetic): the mHC products of 64 tokens x
// one 1,024-element split on mma.sync m16n8k8 TF32, each fp32 operand as
// hi + lo TF32 parts and three products a pair. No host dependencies.
#ifndef WEIR_KERNELS_CUDA_MOE_HC_MIX_TF32_CUH_
#define WEIR_KERNELS_CUDA_MOE_HC_MIX_TF32_CUH_

#include <cstdint>

#include "kernels/cuda/grid_dependency.cuh"
#include "kernels/cuda/moe/hc_mix_split.cuh"
#include "kernels/cuda/moe/hc_sinkhorn.cuh"

namespace weir::kernels::cuda::moe {

inline constexpr int kHcTf32Tokens = 64;  // tokens a CTA: 4 m16 tiles
inline constexpr int kHcTf32Threads = 256;

// v rounded to TF32 (nearest, ties away: cvt.rna), as an fp32 value with its
// low 13 bits zero (cleared here too, so hi + lo below never counts on what
// the conversion leaves there).
__device__ __forceinline__ float Tf32Round(float v) {
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(v));
  return __uint_as_float(r & 0xFFFFE000u);
}

// v = hi + lo with hi = tf32(v); lo = tf32(v - hi) (v - hi is exact in fp32:
// it is v's bits below hi's 11), so hi + lo is v to about 2^-22 relative.
struct Tf32Pair {
  uint32_t hi, lo;
};
__device__ __forceinline__ Tf32Pair Tf32Split(float v) {
  const float hi = Tf32Round(v);
  return {__float_as_uint(hi), __float_as_uint(Tf32Round(__fsub_rn(v, hi)))};
}

// d += A * B on mma.sync m16n8k8 (TF32 operands, fp32 accumulators).
// Fragments (g = lane / 4, t = lane % 4): a0 (row g, k t), a1 (row g + 8,
// k t), a2 (row g, k t + 4), a3 (row g + 8, k t + 4); b0 (k t, column g),
// b1 (k t + 4, column g); d0, d1 (row g, columns 2 t, 2 t + 1), d2, d3
// (row g + 8).
__device__ __forceinline__ void MmaTf32M16N8K8(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                               uint32_t a3, uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
      "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
#else
  __trap();  // built for sm_90a only
#endif
}

// The three products of one k8 step: d += a_lo b_hi + a_hi b_lo + a_hi b_hi
// (small terms first; a_lo b_lo, about 2^-22 of |a b|, is left out).
__device__ __forceinline__ void Mma3xTf32(float (&d)[4], const Tf32Pair (&a)[4], Tf32Pair b0,
                                          Tf32Pair b1) {
  MmaTf32M16N8K8(d, a[0].lo, a[1].lo, a[2].lo, a[3].lo, b0.hi, b1.hi);
  MmaTf32M16N8K8(d, a[0].hi, a[1].hi, a[2].hi, a[3].hi, b0.lo, b1.lo);
  MmaTf32M16N8K8(d, a[0].hi, a[1].hi, a[2].hi, a[3].hi, b0.hi, b1.hi);
}

// Where each lane's registers sit in a 16-element K step: lane (g, t) loads row g's and row g + 8's
// elements 4 t .. 4 t + 3 of x and column (mix) 8 j + g's elements 4 t .. 4 t + 3 of hc_fn. The
// first k8 step takes elements 4 t, 4 t + 1 as its k t, k t + 4; the second 4 t + 2, 4 t + 3. A and
// B name each element by the same k, so every element of the 16 meets its own hc_fn element once.
//
// Grid (splits, groups of kTileRows x kHcTf32Tokens tokens), kHcTf32Threads
// threads. Warp w takes m16 tiles kTileRows (w % 4) .. + kTileRows - 1 of
// the group and half w / 4 of the split's kHcSplitChunk elements; the two
// halves' sums are added in half order, the partials and the last-CTA finish
// are HcMixSplitKernel's (FinishToken). A token's products depend on its own
// row of x alone (an mma's rows never meet), so its bits are the same in any
// call, at any place in it and at any kTileRows: a warp of two tiles (128
// tokens a CTA) makes each step's hc_fn TF32 pairs once for both (the splits
// of hc_fn were 60 of a step's ~140 instructions a tile, and its loads 1.5x
// the bytes of x's from L2), the same mma for each row.
// `row_role` (optional): only tokens with row_role[t] == role get their
// coefficients written (the rest keep what another launch wrote).
// kPromote: each 16-element step's six products go into zeroed
// accumulators and are then added to the running fp32 sums by FADD (round
// to nearest), so the tensor core's accumulation, which does not round to
// nearest, never carries a sum longer than one step (the H100 run of the
// thirty-ninth session measured the coefficients 1.6e-5 from the CPU's with
// the long chains, 5x HcMixSplitK's distance).
// Two CTAs an SM with one m tile a warp; one with two (the registers of two
// tiles' sums and operands: 128 a thread spilled), the same warps' loads in
// flight an SM either way.
template <int kN, bool kPromote = false, int kTileRows = 1>
__global__ void __launch_bounds__(kHcTf32Threads, 2 / kTileRows)
    HcMixTf32Kernel(HcMixKernelArgs a, int64_t tokens, float* __restrict__ partials,
                    uint32_t* __restrict__ counters, const int32_t* __restrict__ row_role,
                    int role) {
  GridDependencyPrologue(HcMixWeightRows<kN>(a));
  constexpr int kMix = (2 + kN) * kN;
  constexpr int kVals = kMix + 1;         // the mixes, then sum v^2
  constexpr int kTiles = (kMix + 7) / 8;  // n8 tiles of mixes
  constexpr int kHalf = kHcSplitChunk / 2;
  constexpr int kCtaTokens = kTileRows * kHcTf32Tokens;
  static_assert(kVals <= 32, "one lane per value in the finish");
  static_assert(kHcTf32Threads == 8 * 32 && kHcTf32Tokens == 4 * 16, "4 m tiles x 2 halves");
  const int split = static_cast<int>(blockIdx.x), splits = static_cast<int>(gridDim.x);
  const int64_t nd = kN * a.dim;
  const int tid = static_cast<int>(threadIdx.x), lane = tid % 32, warp = tid / 32;
  const int g = lane / 4, t = lane % 4;
  const int tile = kTileRows * (warp % 4), half = warp / 4;  // the warp's first m tile
  const int64_t group = blockIdx.y, t0 = group * kCtaTokens;
  // Rows g and g + 8 of the warp's m tile i.
  auto row = [&](int i, int r) -> int64_t { return t0 + 16 * (tile + i) + g + 8 * r; };

  float acc[kTileRows][kTiles][4];
#pragma unroll
  for (int i = 0; i < kTileRows; ++i) {
#pragma unroll
    for (int j = 0; j < kTiles; ++j) {
      acc[i][j][0] = acc[i][j][1] = acc[i][j][2] = acc[i][j][3] = 0.0f;
    }
  }
  float sq[kTileRows][2];  // rows g, g + 8 of each m tile: the lane's elements' squares
#pragma unroll
  for (int i = 0; i < kTileRows; ++i) sq[i][0] = sq[i][1] = 0.0f;
  if (t0 + 16 * tile < tokens) {  // warp-uniform: tiles with no token skip their products
    const float* xr[kTileRows][2];
#pragma unroll
    for (int i = 0; i < kTileRows; ++i) {
      xr[i][0] = a.x + min(row(i, 0), tokens - 1) * nd;
      xr[i][1] = a.x + min(row(i, 1), tokens - 1) * nd;
    }
    const float* w[kTiles];
#pragma unroll
    for (int j = 0; j < kTiles; ++j) w[j] = a.hc_fn + min(8 * j + g, kMix - 1) * nd;
    const int64_t e_begin = static_cast<int64_t>(split) * kHcSplitChunk + half * kHalf;
    // Steps of 16 elements with any in range (warp-uniform: the mma needs
    // every lane); a trip count known on entry lets the unrolled loop issue
    // several steps' loads together.
    const int steps =
        static_cast<int>(max(int64_t{0}, min(int64_t{kHalf / 16}, (nd - e_begin + 15) / 16)));
#pragma unroll 4
    for (int step = 0; step < steps; ++step) {
      const int64_t e = e_begin + 16 * step + 4 * t;
      const bool in = e < nd;  // nd % 4 == 0: the lane's quad is in range or out
      const float4 zero = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      float4 xv[kTileRows][2];
#pragma unroll
      for (int i = 0; i < kTileRows; ++i) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          xv[i][r] =
              in && row(i, r) < tokens ? *reinterpret_cast<const float4*>(xr[i][r] + e) : zero;
        }
      }
      float4 wv[kTiles];
#pragma unroll
      for (int j = 0; j < kTiles; ++j) {
        wv[j] = in && 8 * j + g < kMix ? *reinterpret_cast<const float4*>(w[j] + e) : zero;
      }
      // hc_fn's pairs, once for the warp's m tiles: the first k8 step takes
      // elements 4 t, 4 t + 1, the second 4 t + 2, 4 t + 3.
      Tf32Pair ws[kTiles][4];
#pragma unroll
      for (int j = 0; j < kTiles; ++j) {
        ws[j][0] = Tf32Split(wv[j].x);
        ws[j][1] = Tf32Split(wv[j].y);
        ws[j][2] = Tf32Split(wv[j].z);
        ws[j][3] = Tf32Split(wv[j].w);
      }
#pragma unroll
      for (int i = 0; i < kTileRows; ++i) {
        const float4 xa = xv[i][0], xb = xv[i][1];
        sq[i][0] = __fmaf_rn(xa.x, xa.x, sq[i][0]);
        sq[i][0] = __fmaf_rn(xa.y, xa.y, sq[i][0]);
        sq[i][0] = __fmaf_rn(xa.z, xa.z, sq[i][0]);
        sq[i][0] = __fmaf_rn(xa.w, xa.w, sq[i][0]);
        sq[i][1] = __fmaf_rn(xb.x, xb.x, sq[i][1]);
        sq[i][1] = __fmaf_rn(xb.y, xb.y, sq[i][1]);
        sq[i][1] = __fmaf_rn(xb.z, xb.z, sq[i][1]);
        sq[i][1] = __fmaf_rn(xb.w, xb.w, sq[i][1]);
        const Tf32Pair s0[4] = {Tf32Split(xa.x), Tf32Split(xb.x), Tf32Split(xa.y), Tf32Split(xb.y)};
        const Tf32Pair s1[4] = {Tf32Split(xa.z), Tf32Split(xb.z), Tf32Split(xa.w), Tf32Split(xb.w)};
#pragma unroll
        for (int j = 0; j < kTiles; ++j) {
          if constexpr (kPromote) {
            float part[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            Mma3xTf32(part, s0, ws[j][0], ws[j][1]);
            Mma3xTf32(part, s1, ws[j][2], ws[j][3]);
#pragma unroll
            for (int c = 0; c < 4; ++c) acc[i][j][c] = __fadd_rn(acc[i][j][c], part[c]);
          } else {
            Mma3xTf32(acc[i][j], s0, ws[j][0], ws[j][1]);
            Mma3xTf32(acc[i][j], s1, ws[j][2], ws[j][3]);
          }
        }
      }
    }
  }
  __shared__ float s_half[2][kCtaTokens][kVals];
#pragma unroll
  for (int i = 0; i < kTileRows; ++i) {
    // A row's squares over the 4 lanes of its quad (fixed order: xor 1, 2).
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      sq[i][r] = __fadd_rn(sq[i][r], __shfl_xor_sync(0xffffffffu, sq[i][r], 1));
      sq[i][r] = __fadd_rn(sq[i][r], __shfl_xor_sync(0xffffffffu, sq[i][r], 2));
    }
    const int row0 = 16 * (tile + i) + g, row1 = row0 + 8;
#pragma unroll
    for (int j = 0; j < kTiles; ++j) {
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        const int m = 8 * j + 2 * t + c;
        if (m < kMix) {
          s_half[half][row0][m] = acc[i][j][c];
          s_half[half][row1][m] = acc[i][j][2 + c];
        }
      }
    }
    if (t == 0) {
      s_half[half][row0][kMix] = sq[i][0];
      s_half[half][row1][kMix] = sq[i][1];
    }
  }
  __syncthreads();
  for (int i = tid; i < kCtaTokens * kVals; i += kHcTf32Threads) {
    const int r = i / kVals, v = i % kVals;
    if (t0 + r >= tokens) continue;
    partials[((t0 + r) * splits + split) * kVals + v] = __fadd_rn(s_half[0][r][v], s_half[1][r][v]);
  }
  __threadfence();
  __syncthreads();
  __shared__ bool s_last;
  if (tid == 0) s_last = atomicAdd(&counters[group], 1u) == static_cast<uint32_t>(splits - 1);
  __syncthreads();
  if (!s_last) return;
  __threadfence();
  if (tid == 0) counters[group] = 0;
  __shared__ float s_mix[kHcTf32Threads / 32][kMix];
  __shared__ float s_total[kHcTf32Threads / 32];
  for (int r = warp; r < kCtaTokens; r += kHcTf32Threads / 32) {  // whole warps
    const int64_t token = t0 + r;
    if (token >= tokens) break;
    if (row_role != nullptr && row_role[token] != role) continue;
    __syncwarp();  // the warp's previous token has read its shared values
    FinishToken<kN>(a, partials, splits, token, lane, s_mix[warp], s_total[warp]);
  }
}

}  // namespace weir::kernels::cuda::moe

#endif  // WEIR_KERNELS_CUDA_MOE_HC_MIX_TF32_CUH_
