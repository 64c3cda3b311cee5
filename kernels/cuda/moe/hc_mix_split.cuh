// kernels/cuda/moe/hc_mix_split.cuh — device code of HcMixSplitK
// (hc_mix_split.h states the arithmetic). No host dependencies.
#ifndef WEIR_KERNELS_CUDA_MOE_HC_MIX_SPLIT_CUH_
#define WEIR_KERNELS_CUDA_MOE_HC_MIX_SPLIT_CUH_

#include <cstdint>

#include "kernels/cuda/grid_dependency.cuh"
#include "kernels/cuda/moe/hc_sinkhorn.cuh"

namespace weir::kernels::cuda::moe {

inline constexpr int kHcSplitThreads = 256;
inline constexpr int kHcSplitWarps = kHcSplitThreads / 32;
inline constexpr int kHcSplitChunk = 4 * kHcSplitThreads;
inline constexpr int kHcSplitTokens = 4;

// The warp's sums of kV values a lane holds (the fixed butterfly's sums:
// xor 16, 8, 4, 2, 1, every add of two lanes' values), with the reduction
// transposed: at each level a lane keeps half of its values and sends its
// partner the other half, so a level costs one shuffle and one add a kept
// value (a value left over by an odd count is added whole, as the
// butterfly does). fp32 addition commutes, so each value's sum is the
// butterfly's, bit for bit; each value ends in one or more lanes, and
// `out[index]` is written by one of them.
template <int kV>
__device__ __forceinline__ void WarpSumsTransposed(const float (&v)[kV], int lane, float* out) {
  // Levels: the values a lane holds before each, and the half it keeps.
  constexpr int kN0 = kV, kH0 = kN0 / 2, kN1 = kH0 + kN0 % 2, kH1 = kN1 / 2;
  constexpr int kN2 = kH1 + kN1 % 2, kH2 = kN2 / 2, kN3 = kH2 + kN2 % 2, kH3 = kN3 / 2;
  constexpr int kN4 = kH3 + kN3 % 2, kH4 = kN4 / 2, kN5 = kH4 + kN4 % 2;
  float a[kN1], b[kN2], c[kN3], d[kN4], e[kN5];
  auto level = [&](const auto& in, auto& next, int n, int h, int off) {
    const bool upper = (lane & off) != 0;
#pragma unroll
    for (int j = 0; j < h; ++j) {
      const float keep = upper ? in[h + j] : in[j];
      const float send = upper ? in[j] : in[h + j];
      next[j] = __fadd_rn(keep, __shfl_xor_sync(0xffffffffu, send, off));
    }
    if (n % 2 == 1) next[h] = __fadd_rn(in[n - 1], __shfl_xor_sync(0xffffffffu, in[n - 1], off));
  };
  level(v, a, kN0, kH0, 16);
  level(a, b, kN1, kH1, 8);
  level(b, c, kN2, kH2, 4);
  level(c, d, kN3, kH3, 2);
  level(d, e, kN4, kH4, 1);
  // Position p of e back to its value: undo the levels, last first; a
  // value taken whole at a level is written by the lane whose bit is 0.
  constexpr int kN[5] = {kN0, kN1, kN2, kN3, kN4}, kH[5] = {kH0, kH1, kH2, kH3, kH4};
  constexpr int kOff[5] = {16, 8, 4, 2, 1};
#pragma unroll
  for (int p = 0; p < kN5; ++p) {
    int index = p;
    bool owner = true;
#pragma unroll
    for (int l = 4; l >= 0; --l) {
      const bool upper = (lane & kOff[l]) != 0;
      if (index < kH[l]) {
        index += upper ? kH[l] : 0;
      } else {  // the odd value, added whole
        index = kN[l] - 1;
        owner = owner && !upper;
      }
    }
    if (owner) out[index] = e[p];
  }
}

// After every warp's sums are in s_warp: the CTA's partial of each of its
// kRows tokens (the warps' sums added in warp order) into partials, then the
// group's counter; true in the CTA that arrived last (it finishes the group).
template <int kRows, int kVals>
__device__ __forceinline__ bool WritePartials(const float (&s_warp)[kHcSplitWarps][kRows][kVals],
                                              int64_t t0, int64_t tokens, int split, int splits,
                                              int64_t group, float* partials, uint32_t* counters,
                                              int tid) {
  __syncthreads();
  for (int i = tid; i < kRows * kVals; i += kHcSplitThreads) {
    const int r = i / kVals, v = i % kVals;
    if (t0 + r >= tokens) continue;
    float s = s_warp[0][r][v];
    for (int w = 1; w < kHcSplitWarps; ++w) s = __fadd_rn(s, s_warp[w][r][v]);
    partials[((t0 + r) * splits + split) * kVals + v] = s;
  }
  __threadfence();
  __syncthreads();
  __shared__ bool s_last;
  if (tid == 0) s_last = atomicAdd(&counters[group], 1u) == static_cast<uint32_t>(splits - 1);
  __syncthreads();
  return s_last;
}

// The last CTA's work for one token, on one warp: the token's partials
// added in split order (8 loads in flight), the scale by rsqrt(mean v^2 +
// eps), then the split + Sinkhorn (HcSplitSinkhornLanes). `mix` and `total`
// are the warp's own shared values.
template <int kN>
__device__ __forceinline__ void FinishToken(const HcMixKernelArgs& a, const float* partials,
                                            int splits, int64_t token, int lane, float* mix,
                                            float& total) {
  constexpr int kMix = (2 + kN) * kN;
  constexpr int kVals = kMix + 1;
  const int64_t nd = kN * a.dim;
  if (lane < kVals) {
    const float* p = partials + token * splits * kVals + lane;
    float s = 0.0f;
    for (int sp0 = 0; sp0 < splits; sp0 += 8) {  // 8 loads in flight, added in split order
      float buf[8];
#pragma unroll
      for (int j = 0; j < 8; ++j) buf[j] = sp0 + j < splits ? __ldcg(p + (sp0 + j) * kVals) : 0.0f;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        if (sp0 + j < splits) s = sp0 + j == 0 ? buf[j] : __fadd_rn(s, buf[j]);
      }
    }
    if (lane < kMix) {
      mix[lane] = s;
    } else {
      total = s;
    }
  }
  __syncwarp();
  const float mean = __fdiv_rn(total, static_cast<float>(nd));
  const float rsqrt = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(mean, a.norm_eps)));
  if (lane < kMix) mix[lane] = __fmul_rn(mix[lane], rsqrt);
  __syncwarp();
  HcSplitSinkhornLanes(a, mix, a.pre + token * kN, a.post + token * kN, a.comb + token * kN * kN,
                       lane);
}

// The rows of hc_fn a CTA of the first token group reads (its split's
// columns of every mix), for GridDependencyPrologue to ask L2 for before the
// wait (weights: no kernel of a step writes them).
template <int kN, bool kSplitOnY = false>
__device__ __forceinline__ L2Rows HcMixWeightRows(const HcMixKernelArgs& a) {
  const int64_t nd = kN * a.dim;
  const int64_t e0 = static_cast<int64_t>(kSplitOnY ? blockIdx.y : blockIdx.x) * kHcSplitChunk;
  if ((kSplitOnY ? blockIdx.x : blockIdx.y) != 0 || e0 >= nd) return {};
  return {.base = a.hc_fn + e0,
          .stride = nd * static_cast<long long>(sizeof(float)),
          .bytes = static_cast<unsigned>(min(int64_t{kHcSplitChunk}, nd - e0) * sizeof(float)),
          .rows = (2 + kN) * kN};
}

// Grid (splits, token groups of kR tokens), kHcSplitThreads threads. partials
// holds [tokens, splits, (2+N)N + 1] floats; counters one word per group, zero
// on entry and left zero by the group's last CTA. A token's arithmetic is the
// same for every kR (its sums never meet another token's), so the group size
// moves time only.
// kSplitOnY (prefill-sized calls): grid (chunks of `loops` groups, splits)
// instead, each CTA walking its chunk's groups in turn. The CTAs an SM holds
// at once then mostly share one split, so its 96 KB of hc_fn (4 mixes) is read
// from L2 once for many groups, where every 4-token CTA read it again (2.75 GB
// of L2 reads a call at 4,096 tokens). The same arithmetic a token.
// kTransposed: the warp sums by WarpSumsTransposed (the same bits, about
// 2.5x fewer instructions than the butterfly on every value).
template <int kN, int kR = kHcSplitTokens, bool kSplitOnY = false, bool kTransposed = false>
__global__ void __launch_bounds__(kHcSplitThreads)
    HcMixSplitKernel(HcMixKernelArgs a, int64_t tokens, float* __restrict__ partials,
                     uint32_t* __restrict__ counters, int loops = 1) {
  GridDependencyPrologue(HcMixWeightRows<kN, kSplitOnY>(a));
  constexpr int kMix = (2 + kN) * kN;
  constexpr int kVals = kMix + 1;  // the mixes, then sum v^2
  static_assert(kVals <= 32, "one lane per value in the finish");
  static_assert(kR >= 1 && kR <= kHcSplitWarps, "a warp per token in the finish");
  const int split = static_cast<int>(kSplitOnY ? blockIdx.y : blockIdx.x);
  const int splits = static_cast<int>(kSplitOnY ? gridDim.y : gridDim.x);
  const int64_t nd = kN * a.dim;
  const int tid = static_cast<int>(threadIdx.x), lane = tid % 32, warp = tid / 32;
  const int64_t first_group =
      static_cast<int64_t>(kSplitOnY ? blockIdx.x : blockIdx.y) * (kSplitOnY ? loops : 1);
  const int n_loops = kSplitOnY ? loops : 1;  // decode's grid: one group, as before
  for (int it = 0; it < n_loops; ++it) {
    const int64_t group = first_group + it;
    const int64_t t0 = group * kR;
    if (t0 >= tokens) break;      // block-uniform
    if (it > 0) __syncthreads();  // the previous group's shared values are used up

    float acc[kR][kVals];
#pragma unroll
    for (int r = 0; r < kR; ++r) {
#pragma unroll
      for (int v = 0; v < kVals; ++v) acc[r][v] = 0.0f;
    }
    const int64_t e0 = static_cast<int64_t>(split) * kHcSplitChunk + 4 * tid;
    if (e0 < nd) {  // nd % 4 == 0: the whole quad is in range
      float4 xv[kR];
#pragma unroll
      for (int r = 0; r < kR; ++r) {
        xv[r] = t0 + r < tokens ? *reinterpret_cast<const float4*>(a.x + (t0 + r) * nd + e0)
                                : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      }
#pragma unroll
      for (int m = 0; m < kMix; ++m) {
        const float4 w = *reinterpret_cast<const float4*>(a.hc_fn + m * nd + e0);
#pragma unroll
        for (int r = 0; r < kR; ++r) {
          float s = acc[r][m];
          s = __fmaf_rn(xv[r].x, w.x, s);
          s = __fmaf_rn(xv[r].y, w.y, s);
          s = __fmaf_rn(xv[r].z, w.z, s);
          acc[r][m] = __fmaf_rn(xv[r].w, w.w, s);
        }
      }
#pragma unroll
      for (int r = 0; r < kR; ++r) {
        float s = 0.0f;
        s = __fmaf_rn(xv[r].x, xv[r].x, s);
        s = __fmaf_rn(xv[r].y, xv[r].y, s);
        s = __fmaf_rn(xv[r].z, xv[r].z, s);
        acc[r][kMix] = __fmaf_rn(xv[r].w, xv[r].w, s);
      }
    }
    // Thread sums -> warp sums (fixed butterfly; every lane ends with the
    // same value) -> the CTA's partial (warps in order).
    __shared__ float s_warp[kHcSplitWarps][kR][kVals];
    if constexpr (kTransposed) {
      WarpSumsTransposed<kR * kVals>(reinterpret_cast<const float(&)[kR * kVals]>(acc), lane,
                                     &s_warp[warp][0][0]);
    } else {
#pragma unroll
      for (int r = 0; r < kR; ++r) {
#pragma unroll
        for (int v = 0; v < kVals; ++v) {
          float s = acc[r][v];
#pragma unroll
          for (int off = 16; off > 0; off /= 2)
            s = __fadd_rn(s, __shfl_xor_sync(0xffffffffu, s, off));
          if (lane == 0) s_warp[warp][r][v] = s;
        }
      }
    }
    const bool last =
        WritePartials<kR, kVals>(s_warp, t0, tokens, split, splits, group, partials, counters, tid);
    if (!last) continue;  // block-uniform
    __threadfence();
    if (tid == 0) counters[group] = 0;
    __shared__ float s_mix[kR][kMix];
    __shared__ float s_total[kR];
    const int64_t token = t0 + warp;
    if (warp >= kR || token >= tokens) continue;  // whole warps: no barrier until the next group
    FinishToken<kN>(a, partials, splits, token, lane, s_mix[warp], s_total[warp]);
  }
}

// The token loop (prefill-sized calls, HcMixSplitK's `token_loop`): grid
// (splits, groups of kT tokens). Each thread loads its quad of every mix's
// hc_fn row once into registers and walks the group's tokens one at a time:
// a token's products, its FMA chains and the warp tree (WarpSumsTransposed)
// are HcMixSplitKernel's, the partials and the finish too, so the same bits;
// hc_fn is read from L2 once for kT tokens instead of kHcSplitTokens.
template <int kN, int kT>
__global__ void __launch_bounds__(kHcSplitThreads)
    HcMixSplitLoopKernel(HcMixKernelArgs a, int64_t tokens, float* __restrict__ partials,
                         uint32_t* __restrict__ counters) {
  GridDependencyPrologue(HcMixWeightRows<kN>(a));
  constexpr int kMix = (2 + kN) * kN;
  constexpr int kVals = kMix + 1;
  static_assert(kVals <= 32, "one lane per value in the finish");
  const int split = static_cast<int>(blockIdx.x), splits = static_cast<int>(gridDim.x);
  const int64_t nd = kN * a.dim;
  const int tid = static_cast<int>(threadIdx.x), lane = tid % 32, warp = tid / 32;
  const int64_t group = blockIdx.y, t0 = group * kT;
  const int64_t e0 = static_cast<int64_t>(split) * kHcSplitChunk + 4 * tid;
  const bool in = e0 < nd;  // nd % 4 == 0: the whole quad is in range
  float4 w[kMix];
#pragma unroll
  for (int m = 0; m < kMix; ++m) {
    w[m] = in ? *reinterpret_cast<const float4*>(a.hc_fn + m * nd + e0)
              : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }
  __shared__ float s_warp[kHcSplitWarps][kT][kVals];
#pragma unroll 1
  for (int r = 0; r < kT; ++r) {
    float acc[kVals];
#pragma unroll
    for (int v = 0; v < kVals; ++v) acc[v] = 0.0f;
    if (in && t0 + r < tokens) {
      const float4 xv = *reinterpret_cast<const float4*>(a.x + (t0 + r) * nd + e0);
#pragma unroll
      for (int m = 0; m < kMix; ++m) {
        float s = acc[m];
        s = __fmaf_rn(xv.x, w[m].x, s);
        s = __fmaf_rn(xv.y, w[m].y, s);
        s = __fmaf_rn(xv.z, w[m].z, s);
        acc[m] = __fmaf_rn(xv.w, w[m].w, s);
      }
      float s = 0.0f;
      s = __fmaf_rn(xv.x, xv.x, s);
      s = __fmaf_rn(xv.y, xv.y, s);
      s = __fmaf_rn(xv.z, xv.z, s);
      acc[kMix] = __fmaf_rn(xv.w, xv.w, s);
    }
    WarpSumsTransposed<kVals>(acc, lane, &s_warp[warp][r][0]);
  }
  // The last CTA of the group to get here finishes it, a warp a token.
  const bool last =
      WritePartials<kT, kVals>(s_warp, t0, tokens, split, splits, group, partials, counters, tid);
  if (!last) return;
  __threadfence();
  if (tid == 0) counters[group] = 0;
  __shared__ float s_mix[kHcSplitWarps][kMix];
  __shared__ float s_total[kHcSplitWarps];
  for (int r = warp; r < kT; r += kHcSplitWarps) {  // whole warps
    const int64_t token = t0 + r;
    if (token >= tokens) break;
    __syncwarp();  // the warp's previous token has read its shared values
    FinishToken<kN>(a, partials, splits, token, lane, s_mix[warp], s_total[warp]);
  }
}

}  // namespace weir::kernels::cuda::moe

#endif  // WEIR_KERNELS_CUDA_MOE_HC_MIX_SPLIT_CUH_
