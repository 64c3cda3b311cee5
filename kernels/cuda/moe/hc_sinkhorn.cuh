// kernels/cuda/moe/hc_sinkhorn.cuh — the split + Sinkhorn of the mHC
// coefficients on one warp, bit-identical to kernels/cpu HcSplitSinkhorn
// (device code shared by HcMix and HcMixSplitK).
// No host dependencies.
#ifndef WEIR_KERNELS_CUDA_MOE_HC_SINKHORN_CUH_
#define WEIR_KERNELS_CUDA_MOE_HC_SINKHORN_CUH_

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

// HcSplitSinkhornWarp's operations, each the same one in the same order (so
// the same bits: the CPU function's), held in registers: lane e < n*n keeps
// entry e (row e / n, column e % n); a row or column sum gathers its n
// entries by shuffles and adds them from 0 in index order, the row maximum
// compares them in index order. No shared memory and no __syncwarp between
// the 2 * iters normalisations (the shared-memory form spent ~1 us on each).
// REQUIRES: n * n <= 32; called by all 32 lanes of a warp; `mixes` readable
// by every lane.
__device__ inline void HcSplitSinkhornLanes(const HcMixKernelArgs& a, const float* mixes,
                                            float* pre, float* post, float* comb, int lane) {
  constexpr unsigned kAll = 0xffffffffu;
  const int n = a.n, nn = n * n;
  const float eps = a.hc_eps;
  if (lane < n) {
    pre[lane] =
        __fadd_rn(SigmoidF(__fadd_rn(__fmul_rn(mixes[lane], a.scale[0]), a.base[lane])), eps);
    post[lane] = __fmul_rn(
        2.0f, SigmoidF(__fadd_rn(__fmul_rn(mixes[n + lane], a.scale[1]), a.base[n + lane])));
  }
  const int e = lane < nn ? lane : 0;
  const int row = (e / n) * n, col = e % n;
  auto row_sum = [&](float v) {
    float sum = 0.0f;
    for (int k = 0; k < n; ++k) sum = __fadd_rn(sum, __shfl_sync(kAll, v, row + k));
    return sum;
  };
  auto col_sum = [&](float v) {
    float sum = 0.0f;
    for (int j = 0; j < n; ++j) sum = __fadd_rn(sum, __shfl_sync(kAll, v, j * n + col));
    return sum;
  };
  float c = __fadd_rn(__fmul_rn(mixes[2 * n + e], a.scale[2]), a.base[2 * n + e]);
  float m = __shfl_sync(kAll, c, row);
  for (int k = 1; k < n; ++k) {
    const float v = __shfl_sync(kAll, c, row + k);
    m = v > m ? v : m;
  }
  c = ExpF(__fsub_rn(c, m));
  c = __fadd_rn(__fdiv_rn(c, row_sum(c)), eps);
  c = __fdiv_rn(c, __fadd_rn(col_sum(c), eps));
  for (int it = 1; it < a.iters; ++it) {
    c = __fdiv_rn(c, __fadd_rn(row_sum(c), eps));
    c = __fdiv_rn(c, __fadd_rn(col_sum(c), eps));
  }
  if (lane < nn) comb[lane] = c;
}

}  // namespace weir::kernels::cuda::moe

#endif  // WEIR_KERNELS_CUDA_MOE_HC_SINKHORN_CUH_
