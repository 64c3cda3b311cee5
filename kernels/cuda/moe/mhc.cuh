// kernels/cuda/moe/mhc.cuh — device code of HcMix, HcCollapse and HcExpand.
// No host dependencies.
#ifndef WEIR_KERNELS_CUDA_MOE_MHC_CUH_
#define WEIR_KERNELS_CUDA_MOE_MHC_CUH_

#include <cstdint>

#include "kernels/cuda/moe/numerics.cuh"

namespace weir::kernels::cuda::moe {

inline constexpr int kHcMaxN = 8;

struct HcMixKernelArgs {
  const float* x;
  const float* hc_fn;
  const float* mixes;  // precomputed products [tokens, (2+n)n], or null
  const float* scale;
  const float* base;
  float* pre;
  float* post;
  float* comb;
  int64_t dim;
  int n;
  int iters;
  float hc_eps;
  float norm_eps;
};

// The split + Sinkhorn of kernels/cpu/mhc.cc HcSplitSinkhorn for one token,
// spread over the lanes of one warp: lane e holds
// entries e and e + 32 of the n x n matrix (in shared memory `c`). Every row
// and column sum is still taken by one lane at a time in the serial order
// (k = 0.., j = 0..), from values all lanes agree on, and every division is
// the serial one, so the results are the CPU function's bits; the 2n
// normalisations of an iteration run in parallel instead of one after
// another. REQUIRES: called by all 32 lanes of a warp; `c` holds n*n floats.
__device__ inline void HcSplitSinkhornWarp(const HcMixKernelArgs& a, const float* mixes,
                                           float* c, float* pre, float* post, float* comb,
                                           int lane) {
  const int n = a.n, nn = n * n;
  const float eps = a.hc_eps;
  const float s0 = a.scale[0], s1 = a.scale[1], s2 = a.scale[2];
  if (lane < n) {
    pre[lane] = __fadd_rn(SigmoidF(__fadd_rn(__fmul_rn(mixes[lane], s0), a.base[lane])), eps);
    post[lane] =
        __fmul_rn(2.0f, SigmoidF(__fadd_rn(__fmul_rn(mixes[n + lane], s1), a.base[n + lane])));
  }
  // Row softmax over k: logits, then exp(logit - row max), then / sum + eps.
  for (int e = lane; e < nn; e += 32) {
    c[e] = __fadd_rn(__fmul_rn(mixes[2 * n + e], s2), a.base[2 * n + e]);
  }
  __syncwarp();
  float exps[2];
  for (int i = 0, e = lane; e < nn; ++i, e += 32) {
    const float* row = c + (e / n) * n;
    float m = row[0];
    for (int k = 1; k < n; ++k) m = row[k] > m ? row[k] : m;
    exps[i] = ExpF(__fsub_rn(c[e], m));
  }
  __syncwarp();
  for (int i = 0, e = lane; e < nn; ++i, e += 32) c[e] = exps[i];
  __syncwarp();
  float next[2];
  for (int i = 0, e = lane; e < nn; ++i, e += 32) {
    const float* row = c + (e / n) * n;
    float sum = 0.0f;
    for (int k = 0; k < n; ++k) sum = __fadd_rn(sum, row[k]);
    next[i] = __fadd_rn(__fdiv_rn(c[e], sum), eps);
  }
  __syncwarp();
  for (int i = 0, e = lane; e < nn; ++i, e += 32) c[e] = next[i];
  __syncwarp();
  // Divides every entry by its row (rows) or column (!rows) sum + eps, the
  // sums taken before any entry changes.
  auto normalize = [&](bool rows) {
    float out[2];
    for (int i = 0, e = lane; e < nn; ++i, e += 32) {
      const int j = e / n, k = e % n;
      float sum = 0.0f;
      if (rows) {
        for (int kk = 0; kk < n; ++kk) sum = __fadd_rn(sum, c[j * n + kk]);
      } else {
        for (int jj = 0; jj < n; ++jj) sum = __fadd_rn(sum, c[jj * n + k]);
      }
      out[i] = __fdiv_rn(c[e], __fadd_rn(sum, eps));
    }
    __syncwarp();
    for (int i = 0, e = lane; e < nn; ++i, e += 32) c[e] = out[i];
    __syncwarp();
  };
  normalize(false);
  for (int it = 1; it < a.iters; ++it) {
    normalize(true);
    normalize(false);
  }
  for (int e = lane; e < nn; e += 32) comb[e] = c[e];
}

// One block per token. The (2+n)n products come precomputed (a.mixes) or
// are taken by the warps round robin in fmath::LaneSum order; the first warp
// sums v^2 in double in fmath::LaneSum order, as kernels/cpu
// HcMixFromProducts does; the first warp then runs the split + Sinkhorn
// (HcSplitSinkhornWarp, the CPU function's bits). Given the CPU's
// products, bit-identical to HcMixFromProducts.
template <int kThreads>
__global__ void HcMixKernel(HcMixKernelArgs a) {
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
    HcSplitSinkhornWarp(a, s_mix, s_comb, a.pre + token * n, a.post + token * n,
                        a.comb + token * n * n, lane);
  }
}

// One thread per out[t, c].
__global__ void HcCollapseKernel(const float* __restrict__ x, const float* __restrict__ pre,
                                 float* __restrict__ out, int64_t tokens, int64_t dim, int n,
                                 bool round_bf16) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= tokens * dim) return;
  const int64_t t = i / dim, c = i % dim;
  float acc = 0.0f;
  for (int j = 0; j < n; ++j) acc = __fadd_rn(acc, __fmul_rn(pre[t * n + j], x[(t * n + j) * dim + c]));
  out[i] = round_bf16 ? RoundToBf16(acc) : acc;
}

// One thread per out[t, k, c].
__global__ void HcExpandKernel(const float* __restrict__ x, const float* __restrict__ y,
                               const float* __restrict__ post, const float* __restrict__ comb,
                               float* __restrict__ out, int64_t tokens, int64_t dim, int n,
                               bool round_bf16) {
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
