// kernels/cuda/moe/mhc.h
//
// Manifold-constrained hyper-connections on the GPU: the CUDA backend of
// kernels/cpu/mhc.h (spec §4.6) and of worker/model/ops.h HcMix / HcCollapse /
// HcExpand.
//
// HcMix, one thread block per token:
//   mixes = (hc_fn v) * rsqrt(mean(v^2) + norm_eps)   v = X_t flattened [n*dim]
//     each product: given (HcMixParams::mixes, e.g. from RowStableMatmul) or
//     summed by a warp in the fmath::LaneSum order; sum(v^2) in double in the
//     fmath::LaneSum order, as the CPU's HcMixFromProducts
//   then HcMixFromProducts' scale + split + Sinkhorn on one warp
//   (moe/hc_sinkhorn.cuh) in the CPU's exact operation order
//   (fmath::ExpF / SigmoidF). Given the CPU's products, bit-identical to HcMixFromProducts; with its own products it
//   differs from cpu::HcMix (OpenBLAS sgemm) by the products' order only.
// HcCollapse / HcExpand: one thread per output element, sums over j in index
//   order with separate fp32 multiply and add, like the CPU: bit-identical to
//   kernels/cpu, including the optional bf16 rounding (nearest even) of the
//   outputs.
//
// Thread safety: stateless; safe from any thread.

#ifndef WEIR_KERNELS_CUDA_MOE_MHC_H_
#define WEIR_KERNELS_CUDA_MOE_MHC_H_

#include <cstdint>

#include "absl/status/status.h"

typedef struct CUstream_st* cudaStream_t;

namespace weir::kernels::cuda {

inline constexpr int kHcMaxMult = 8;

struct HcMixParams {
  const float* x = nullptr;      // device [tokens, n, dim] residual streams
  const float* hc_fn = nullptr;  // device [(2+n)*n, n*dim] fp32
  // device [tokens, (2+n)*n]: the products x . hc_fn computed elsewhere (e.g.
  // dense::RowStableMatmul, bit-identical to the CPU's RowStableGemm), or
  // null to compute them here (fmath::LaneSum order). When set, hc_fn is not
  // read and the result is bit-identical to cpu::HcMixFromProducts.
  const float* mixes = nullptr;
  const float* scale = nullptr;  // device [3]
  const float* base = nullptr;   // device [(2+n)*n]
  float* pre = nullptr;          // device out [tokens, n]
  float* post = nullptr;         // device out [tokens, n]
  float* comb = nullptr;         // device out [tokens, n, n], comb[j, k]
  int64_t tokens = 0;
  int64_t dim = 0;
  int hc_mult = 4;
  int sinkhorn_iters = 20;
  float hc_eps = 1e-6f;
  float norm_eps = 1e-20f;
};

// True for tokens, dim > 0, 1 <= hc_mult <= kHcMaxMult, sinkhorn_iters >= 1
// and non-null arrays.
bool SupportsHcMix(const HcMixParams& params);

// Enqueues pre/post/comb of every token on `stream`. INVALID_ARGUMENT when
// SupportsHcMix is false; INTERNAL with the CUDA error if the launch fails.
absl::Status HcMix(const HcMixParams& params, cudaStream_t stream);

struct HcCollapseParams {
  const float* x = nullptr;    // device [tokens, n, dim]
  const float* pre = nullptr;  // device [tokens, n]
  float* out = nullptr;        // device [tokens, dim]; must not overlap x
  int64_t tokens = 0;
  int64_t dim = 0;
  int hc_mult = 4;
  bool round_bf16 = true;      // round out to bf16 (ActivationPrecision::kBf16)
};

// True for tokens, dim > 0, 1 <= hc_mult <= kHcMaxMult, non-null arrays.
bool SupportsHcCollapse(const HcCollapseParams& params);

// Enqueues out[t, c] = sum_j pre[t, j] * x[t, j, c] on `stream`. Errors as HcMix.
absl::Status HcCollapse(const HcCollapseParams& params, cudaStream_t stream);

// HcCollapse, then RmsNorm of each collapsed row with `weight`, in one
// launch and with the bits of the two (kernels/cuda/rms_norm.h):
//   out[t] = RmsNorm(collapse_t) * weight, collapse_t as HcCollapse writes it
//   (bf16-rounded when round_collapse), out rounded when round_out.
struct HcCollapseNormParams {
  const float* x = nullptr;       // device [tokens, n, dim]
  const float* pre = nullptr;     // device [tokens, n]
  const float* weight = nullptr;  // device [dim]; null means all ones
  float* out = nullptr;           // device [tokens, dim]; must not overlap x
  int64_t tokens = 0;
  int64_t dim = 0;
  int hc_mult = 4;
  float eps = 1e-20f;
  bool round_collapse = true;
  bool round_out = true;
  // Optional: also out's FP8 form in the same launch, the bits ActQuantFp8
  // (kernels/cuda/dense) gives over out: e4m3 codes [tokens, dim] (8-byte
  // aligned), a UE8M0 scale per 32 [tokens, dim / 32]; dim % 32 == 0, out
  // 32-byte aligned. Both or neither.
  uint8_t* codes = nullptr;
  uint8_t* scales = nullptr;
  // Optional: also out's bf16 bits [tokens, dim] (8-byte aligned), ToBf16's
  // (kernels/cuda/decode/rows.h) of each value: the input a bf16 product of
  // out reads, without a ToBf16 launch.
  uint16_t* bf16 = nullptr;
  // Optional, with codes: the bf16 bits [tokens, dim] (16-byte aligned) of
  // the values the FP8 form stands for, the bits Fp8ActBf16
  // (kernels/cuda/dense/act_quant_fp8.h) writes from codes and scales: a
  // bf16 product of the FP8 form (the prompt's) reads them without a
  // widening launch of its own.
  uint16_t* dq16 = nullptr;
  // CTAs a token (hc_norm_split.h): 1 = a block a token, 2, 4 or 8 = a
  // cluster of that many, each collapsing and normalizing a share of the
  // columns; 0 = HcNormClusterRanks(tokens). The same bits whatever it is.
  int cluster_ranks = 0;
  // With one block a token: its threads, 1,024 (0) or 256. 1,024 take a
  // V4.1 row in two passes (a decode step's few tokens want that); 256 take
  // five, but four blocks share an SM where one 1,024-thread block holds it
  // alone, so a prompt chunk's tokens overlap one block's loads with
  // another's norm. The same bits (the norm's sum is warp 0's, the FP8 form
  // a quad's, whatever the threads).
  int block_threads = 0;
};

// True for SupportsHcCollapse's shapes with dim a multiple of 4 and a row
// that fits the default shared memory (dim <= 12256; kStagedRowMaxBytes in
// kernels/cuda/rms_norm.cuh), eps >= 0, codes as above, and cluster_ranks
// 0, 1, 2, 4 or 8 with tokens x ranks below 2^31, bf16 8-byte aligned, and
// dq16 only with codes, 16-byte aligned.
bool SupportsHcCollapseNorm(const HcCollapseNormParams& params);

// Enqueues the fused collapse and norm on `stream`. Errors as HcMix.
absl::Status HcCollapseNorm(const HcCollapseNormParams& params, cudaStream_t stream);

struct HcExpandParams {
  const float* x = nullptr;     // device [tokens, n, dim]
  const float* y = nullptr;     // device [tokens, dim] sublayer output
  const float* post = nullptr;  // device [tokens, n]
  const float* comb = nullptr;  // device [tokens, n, n]
  float* out = nullptr;         // device [tokens, n, dim]; must not overlap x
  int64_t tokens = 0;
  int64_t dim = 0;
  int hc_mult = 4;
  bool round_bf16 = true;       // round out to bf16 (ActivationPrecision::kBf16)
};

// True for tokens, dim > 0, 1 <= hc_mult <= kHcMaxMult, non-null arrays.
bool SupportsHcExpand(const HcExpandParams& params);

// Enqueues out[t, k, c] = post[t, k] * y[t, c] + sum_j comb[t, j, k] * x[t, j, c]
// on `stream`. Errors as HcMix.
absl::Status HcExpand(const HcExpandParams& params, cudaStream_t stream);

// HcExpand and then HcCollapseNorm over the streams it writes, in one launch
// (a block per token): `collapse.x` must be `expand.out`. x_new, the collapse
// and its FP8 form are the two launches' bits. True when both are supported
// on their own, their tokens, dim and hc_mult agree, hc_mult <= 4, and
// expand's x, y and out are 16-byte aligned.
bool SupportsHcExpandCollapseNorm(const HcExpandParams& expand,
                                  const HcCollapseNormParams& collapse);

// Enqueues both on `stream`. INVALID_ARGUMENT when
// SupportsHcExpandCollapseNorm is false; INTERNAL if the launch fails.
absl::Status HcExpandCollapseNorm(const HcExpandParams& expand,
                                  const HcCollapseNormParams& collapse, cudaStream_t stream);

}  // namespace weir::kernels::cuda

#endif  // WEIR_KERNELS_CUDA_MOE_MHC_H_
