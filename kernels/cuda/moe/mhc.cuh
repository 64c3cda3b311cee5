// kernels/cuda/moe/mhc.cuh — device code of HcMix, HcCollapse and HcExpand.
// No host dependencies.
#ifndef WEIR_KERNELS_CUDA_MOE_MHC_CUH_
#define WEIR_KERNELS_CUDA_MOE_MHC_CUH_

#include <cstdint>

#include "kernels/cuda/cluster.cuh"
#include "kernels/cuda/grid_dependency.cuh"
#include "kernels/cuda/moe/hc_norm_split.h"
#include "kernels/cuda/moe/hc_sinkhorn.cuh"
#include "kernels/cuda/moe/numerics.cuh"
#include "kernels/cuda/rms_norm.cuh"

namespace weir::kernels::cuda::moe {

// One block per token. The (2+n)n products come precomputed (a.mixes) or
// are taken by the warps round robin in fmath::LaneSum order; the first warp
// sums v^2 in double in fmath::LaneSum order, as kernels/cpu
// HcMixFromProducts does; the first warp then runs the split + Sinkhorn
// (HcSplitSinkhornLanes when n * n <= 32, else HcSplitSinkhornWarp; both
// the CPU function's bits). Given the CPU's
// products, bit-identical to HcMixFromProducts.
template <int kThreads>
__global__ void HcMixKernel(HcMixKernelArgs a) {
  GridDependencyPrologue();
  namespace fm = ::weir::kernels::fmath;
  constexpr int kWarps = kThreads / 32;
  __shared__ float s_mix[(2 + kHcMaxN) * kHcMaxN];
  __shared__ double s_total;
  const int64_t token = blockIdx.x;
  const int n = a.n, n_mix = (2 + n) * n;
  const int64_t nd = n * a.dim;
  const float* v = a.x + token * nd;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (a.mixes != nullptr) {
    for (int m = threadIdx.x; m < n_mix; m += kThreads) s_mix[m] = a.mixes[token * n_mix + m];
  } else {
    for (int m = warp; m < n_mix; m += kWarps) {
      const float* fn = a.hc_fn + m * nd;
      const float acc = fm::WarpLaneSum<float>(nd, [&](int64_t c) { return fm::FMul(v[c], fn[c]); });
      if (lane == 0) s_mix[m] = acc;
    }
  }
  if (warp == 0) {
    const double total = fm::WarpLaneSum<double>(nd, [&](int64_t c) {
      const double x = v[c];
      return fm::DMul(x, x);  // exact product
    });
    if (lane == 0) s_total = total;
  }
  __syncthreads();
  if (warp == 0) {
    __shared__ float s_comb[kHcMaxN * kHcMaxN];
    const double total = s_total;
    const float mean = __fdiv_rn(static_cast<float>(total), static_cast<float>(nd));
    const float rsqrt = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(mean, a.norm_eps)));
    for (int m = lane; m < n_mix; m += 32) s_mix[m] = __fmul_rn(s_mix[m], rsqrt);
    __syncwarp();
    if (n * n <= 32) {
      HcSplitSinkhornLanes(a, s_mix, a.pre + token * n, a.post + token * n,
                           a.comb + token * n * n, lane);
    } else {
      HcSplitSinkhornWarp(a, s_mix, s_comb, a.pre + token * n, a.post + token * n,
                          a.comb + token * n * n, lane);
    }
  }
}

// One thread per out[t, c].
__global__ void HcCollapseKernel(const float* __restrict__ x, const float* __restrict__ pre,
                                 float* __restrict__ out, int64_t tokens, int64_t dim, int n,
                                 bool round_bf16) {
  GridDependencyPrologue();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= tokens * dim) return;
  const int64_t t = i / dim, c = i % dim;
  float acc = 0.0f;
  for (int j = 0; j < n; ++j) acc = __fadd_rn(acc, __fmul_rn(pre[t * n + j], x[(t * n + j) * dim + c]));
  out[i] = round_bf16 ? RoundToBf16(acc) : acc;
}

// The norm's weight row, which the first block asks L2 for before the wait
// (no kernel of a step writes it).
__device__ __forceinline__ L2Rows NormWeightRow(const float* weight, int64_t dim) {
  return {.base = weight,
          .stride = 0,
          .bytes = static_cast<unsigned>(dim * sizeof(float)),
          .rows = blockIdx.x == 0 ? 1 : 0};
}

// The columns of the token's row this CTA makes: all of them with one block
// a token, its rank's share (HcNormColumnsOf) in a cluster of kRanks.
template <int kRanks>
__device__ __forceinline__ HcNormColumns HcNormOwnColumns(int64_t dim) {
  if constexpr (kRanks == 1) {
    return {0, dim / 4};
  } else {
    return HcNormColumnsOf(dim / 4, kRanks, static_cast<int>(ClusterCtaRank()));
  }
}

// Once this CTA has written its columns `own` of the collapsed row into its
// shared `row`: with one block a token, a block barrier; in a cluster, copies
// them into every other rank's `row` (after the start-up arrive every thread
// made with ClusterArriveRelaxed: every rank has started) and waits until
// every rank's columns are in this CTA's `row`. No rank touches another's
// shared memory after it, so a CTA may then run to its end.
template <int kThreads, int kRanks>
__device__ __forceinline__ void HcNormShareRow(float4* row, HcNormColumns own) {
  if constexpr (kRanks == 1) {
    __syncthreads();
  } else {
    ClusterWait();
    const unsigned me = ClusterCtaRank();
#pragma unroll
    for (unsigned d = 1; d < kRanks; ++d) {
      const uint32_t base = ClusterSharedAddress(row, (me + d) % kRanks);
      for (int64_t i = own.lo + threadIdx.x; i < own.hi; i += kThreads) {
        StoreClusterF32x4(base + static_cast<uint32_t>(i) * 16u, row[i]);
      }
    }
    ClusterSync();
  }
}

// One block per token (kRanks == 1), or a cluster of kRanks CTAs per token
// (hc_norm_split.h: each rank collapses its columns, the ranks exchange them,
// each normalizes its own): the token's HcCollapseKernel row into shared
// memory (dim * 4 bytes, dynamic), then RmsNorm's NormalizeRow over it, so
// out is bit for bit HcCollapse followed by RmsNorm (with their roundings),
// in one launch, whatever kRanks. (The first block asks L2 for the norm's
// weight: NormWeightRow.)
template <int kThreads, int kRanks>
__global__ void __launch_bounds__(kThreads)
    HcCollapseNormKernel(const float* __restrict__ x, const float* __restrict__ pre,
                         const float* __restrict__ weight, float* __restrict__ out, int64_t dim,
                         int n, float eps, bool round_collapse, bool round_out, uint8_t* codes,
                         uint8_t* scales, uint16_t* bf16, uint16_t* dq16) {
  GridDependencyPrologue(NormWeightRow(weight, dim));
  extern __shared__ float4 collapsed[];
  if constexpr (kRanks > 1) ClusterArriveRelaxed();
  const int64_t t = blockIdx.x / kRanks;
  const HcNormColumns own = HcNormOwnColumns<kRanks>(dim);
  const float* p = pre + t * n;
  for (int64_t i = own.lo + threadIdx.x; i < own.hi; i += kThreads) {
    float a[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int j = 0; j < n; ++j) {
      const float4 v = reinterpret_cast<const float4*>(x + (t * n + j) * dim)[i];
      a[0] = __fadd_rn(a[0], __fmul_rn(p[j], v.x));
      a[1] = __fadd_rn(a[1], __fmul_rn(p[j], v.y));
      a[2] = __fadd_rn(a[2], __fmul_rn(p[j], v.z));
      a[3] = __fadd_rn(a[3], __fmul_rn(p[j], v.w));
    }
    if (round_collapse) {
      for (float& v : a) v = RoundToBf16(v);
    }
    collapsed[i] = make_float4(a[0], a[1], a[2], a[3]);
  }
  HcNormShareRow<kThreads, kRanks>(collapsed, own);
  NormalizeRowColumns<kThreads>(
      reinterpret_cast<const float*>(collapsed), weight, out + t * dim, dim, own.lo, own.hi, eps,
      round_out, codes != nullptr ? codes + t * dim : nullptr,
      codes != nullptr ? scales + t * (dim / 32) : nullptr,
      bf16 != nullptr ? bf16 + t * dim : nullptr, dq16 != nullptr ? dq16 + t * dim : nullptr);
}

// HcExpandKernel's streams of one token, then HcCollapseNormKernel over
// them, in one launch (a block or a cluster per token): each thread makes its quads of
// the new streams exactly as HcExpandKernel makes each element (the comb
// products added in stream order, then post * y, then the bf16 rounding),
// stores them, and collapses the values it stored in HcCollapseNormKernel's
// order; the norm is NormalizeRow's. So x_new, out and its FP8 form are
// HcExpand then HcCollapseNorm bit for bit. kN = n streams. kRanks as
// HcCollapseNormKernel's: a rank makes the streams and the collapse of its
// columns only.
template <int kThreads, int kN, int kRanks>
__global__ void __launch_bounds__(kThreads)
    HcExpandCollapseNormKernel(const float* __restrict__ x, const float* __restrict__ y,
                               const float* __restrict__ post, const float* __restrict__ comb,
                               float* __restrict__ x_new, bool round_expand,
                               const float* __restrict__ pre, const float* __restrict__ weight,
                               float* __restrict__ out, int64_t dim, float eps, bool round_collapse,
                               bool round_out, uint8_t* codes, uint8_t* scales, uint16_t* bf16,
                               uint16_t* dq16) {
  GridDependencyPrologue(NormWeightRow(weight, dim));
  extern __shared__ float4 collapsed[];
  if constexpr (kRanks > 1) ClusterArriveRelaxed();
  const int64_t t = blockIdx.x / kRanks;
  const HcNormColumns own = HcNormOwnColumns<kRanks>(dim);
  const float* p = pre + t * kN;
  const float4* y4 = reinterpret_cast<const float4*>(y + t * dim);
  for (int64_t i = own.lo + threadIdx.x; i < own.hi; i += kThreads) {
    float4 xo[kN];
#pragma unroll
    for (int j = 0; j < kN; ++j) xo[j] = reinterpret_cast<const float4*>(x + (t * kN + j) * dim)[i];
    const float4 yv = y4[i];
    float a[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int k = 0; k < kN;
         ++k) {  // new stream k: HcExpandKernel's element, then its collapse term
      float m[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
      for (int j = 0; j < kN; ++j) {
        const float w = comb[(t * kN + j) * kN + k];
        m[0] = __fadd_rn(m[0], __fmul_rn(w, xo[j].x));
        m[1] = __fadd_rn(m[1], __fmul_rn(w, xo[j].y));
        m[2] = __fadd_rn(m[2], __fmul_rn(w, xo[j].z));
        m[3] = __fadd_rn(m[3], __fmul_rn(w, xo[j].w));
      }
      const float po = post[t * kN + k];
      float v[4] = {__fadd_rn(__fmul_rn(po, yv.x), m[0]), __fadd_rn(__fmul_rn(po, yv.y), m[1]),
                    __fadd_rn(__fmul_rn(po, yv.z), m[2]), __fadd_rn(__fmul_rn(po, yv.w), m[3])};
      if (round_expand) {
        for (float& e : v) e = RoundToBf16(e);
      }
      reinterpret_cast<float4*>(x_new + (t * kN + k) * dim)[i] =
          make_float4(v[0], v[1], v[2], v[3]);
#pragma unroll
      for (int q = 0; q < 4; ++q) a[q] = __fadd_rn(a[q], __fmul_rn(p[k], v[q]));
    }
    if (round_collapse) {
      for (float& v : a) v = RoundToBf16(v);
    }
    collapsed[i] = make_float4(a[0], a[1], a[2], a[3]);
  }
  HcNormShareRow<kThreads, kRanks>(collapsed, own);
  NormalizeRowColumns<kThreads>(
      reinterpret_cast<const float*>(collapsed), weight, out + t * dim, dim, own.lo, own.hi, eps,
      round_out, codes != nullptr ? codes + t * dim : nullptr,
      codes != nullptr ? scales + t * (dim / 32) : nullptr,
      bf16 != nullptr ? bf16 + t * dim : nullptr, dq16 != nullptr ? dq16 + t * dim : nullptr);
}

// One thread per out[t, k, c].
__global__ void HcExpandKernel(const float* __restrict__ x, const float* __restrict__ y,
                               const float* __restrict__ post, const float* __restrict__ comb,
                               float* __restrict__ out, int64_t tokens, int64_t dim, int n,
                               bool round_bf16) {
  GridDependencyPrologue();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= tokens * n * dim) return;
  const int64_t c = i % dim, tk = i / dim, t = tk / n, k = tk % n;
  float mixed = 0.0f;
  for (int j = 0; j < n; ++j) {
    mixed = __fadd_rn(mixed, __fmul_rn(comb[(t * n + j) * n + k], x[(t * n + j) * dim + c]));
  }
  const float v = __fadd_rn(__fmul_rn(post[t * n + k], y[t * dim + c]), mixed);
  out[i] = round_bf16 ? RoundToBf16(v) : v;
}

}  // namespace weir::kernels::cuda::moe

#endif  // WEIR_KERNELS_CUDA_MOE_MHC_CUH_
