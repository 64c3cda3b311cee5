// kernels/cpu/mhc.h
//
// Manifold-constrained hyper-connections of DeepSeek-V4.1 (spec §4.6): the
// residual is carried as n = hc_mult streams X [tokens, n, dim]. Per sublayer:
//   v      = flatten(X_t) (n*dim, fp32)
//   mixes  = (hc_fn v) * rsqrt(mean(v^2) + norm_eps)          hc_fn [(2+n)n, n*dim]
//   pre    = sigmoid(mixes[0:n] * scale[0] + base[0:n]) + hc_eps
//   post   = 2 * sigmoid(mixes[n:2n] * scale[1] + base[n:2n])
//   C[j,k] = mixes[2n + j*n + k] * scale[2] + base[2n + j*n + k]
//   C      = softmax_k(C) + hc_eps;  C /= (sum_j C + hc_eps)
//   repeat iters-1: C /= (sum_k C + hc_eps); C /= (sum_j C + hc_eps)
//   collapse: x_in[c]  = sum_j pre[j] * X[j, c]                (HcCollapse)
//   expand:   X'[k, c] = post[k] * y[c] + sum_j C[j,k] X[j,c]  (HcExpand)
// Sums over j and k run in index order in fp32; sum(v^2) is accumulated in
// double in the kernels/common/fmath.h LaneSum order; exp and sigmoid are
// fmath's. The single-pass schedule (which pre collapses which sublayer) is
// the model's business. With `bf16_boundaries` the collapsed input and the
// expanded streams are rounded to bf16, as the reference stores them.
//
// Thread safety: pure functions over caller-owned memory.

#ifndef WEIR_KERNELS_CPU_MHC_H_
#define WEIR_KERNELS_CPU_MHC_H_

#include <cstdint>
#include <span>

#include "absl/status/status.h"

namespace weir::kernels::cpu {

struct HcParams {
  int hc_mult = 4;
  int sinkhorn_iters = 20;
  float hc_eps = 1e-6f;
  float norm_eps = 1e-20f;
};

struct HcMixArgs {
  std::span<const float> x;      // [tokens, n, dim] residual streams
  std::span<const float> hc_fn;  // [(2+n)*n, n*dim] fp32
  std::span<const float> scale;  // [3]
  std::span<const float> base;   // [(2+n)*n]
  std::span<float> pre;          // out [tokens, n]
  std::span<float> post;         // out [tokens, n]
  std::span<float> comb;         // out [tokens, n, n], comb[j, k]
  int64_t tokens = 0;
  int64_t dim = 0;
};

// Computes pre/post/comb for every token (mixes + Sinkhorn). Returns
// INVALID_ARGUMENT on bad params (hc_mult < 1, iters < 1) or mis-sized spans.
absl::Status HcMix(const HcParams& params, const HcMixArgs& args);

// HcMix after the mixing product: scales each token's row of `mixes`
// [tokens, (2+n)*n] = x . hc_fn^T (in place) by rsqrt(mean(x^2) + eps) of its
// stream x [tokens, n*dim] (sum of squares in double) and splits it into
// pre/post/comb. For backends that compute the product themselves.
// REQUIRES: `args` passed HcMix's shape checks; mixes.size() == tokens*(2+n)*n.
absl::Status HcMixFromProducts(const HcParams& params, const HcMixArgs& args,
                               std::span<float> mixes);

// The split + Sinkhorn step alone, for one token: `mixes` [(2+n)*n] ->
// pre [n], post [n], comb [n, n]. Same errors.
absl::Status HcSplitSinkhorn(const HcParams& params, std::span<const float> mixes,
                             std::span<const float> scale, std::span<const float> base,
                             std::span<float> pre, std::span<float> post, std::span<float> comb);

// out[t, c] = sum_j pre[t, j] * x[t, j, c]. Shapes: x [tokens, n, dim],
// pre [tokens, n], out [tokens, dim].
absl::Status HcCollapse(std::span<const float> x, std::span<const float> pre, int64_t tokens,
                        int hc_mult, int64_t dim, bool bf16_boundaries, std::span<float> out);

// out[t, k, c] = post[t, k] * y[t, c] + sum_j comb[t, j, k] * x[t, j, c].
// Shapes: x, out [tokens, n, dim] (must not overlap), y [tokens, dim],
// post [tokens, n], comb [tokens, n, n].
absl::Status HcExpand(std::span<const float> x, std::span<const float> y,
                      std::span<const float> post, std::span<const float> comb, int64_t tokens,
                      int hc_mult, int64_t dim, bool bf16_boundaries, std::span<float> out);

}  // namespace weir::kernels::cpu

#endif  // WEIR_KERNELS_CPU_MHC_H_
