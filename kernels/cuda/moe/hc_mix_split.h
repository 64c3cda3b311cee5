// kernels/cuda/moe/hc_mix_split.h
//
// HcMixSplitK: the mHC coefficients of kernels/cuda/moe/mhc.h HcMix for the
// `fast` numerics (shared/GPU.md), in one launch spread over the GPU instead
// of a serial dot product per mix and one block per token:
//
//   mixes = (hc_fn v) * rsqrt(mean(v^2) + norm_eps)   v = X_t flattened [n*dim]
//   pre, post, comb = HcMix's split + Sinkhorn of mixes
//
// Arithmetic, per token (identical for every token count, token position and
// grid; nothing depends on the other tokens, so a token's coefficients are
// batch-invariant):
//   * v is cut into kHcMixChunk-element chunks (split s covers chunk s); in
//     a chunk, thread t of the CTA's 256 takes elements 4t .. 4t+3 and
//     accumulates each product (and v^2) with fma in ascending order, one fp32
//     accumulator per (mix, token); the 256 thread sums meet in a fixed xor
//     butterfly inside each warp (16, 8, 4, 2, 1), then the 8 warp sums are
//     added in warp order: one partial per (token, split, mix) and the
//     token's sum of squares.
//   * The CTA that finishes a group of tokens last (a counter per group)
//     adds each value's partials in split order, scales, and runs the split +
//     Sinkhorn of HcMix in the registers of one warp per token
//     (HcSplitSinkhornLanes: kernels/cpu HcSplitSinkhorn's operations, so
//     only the mixes' summation order differs from the reference).
// Differs from the reference (products in fmath::LaneSum order, v^2 summed in
// double) by fp32 summation order only: |mix - exact| <= ~(nd / 1024 + 40)
// 2^-24 sum |v_k w_k| before the scale, and sum v^2 to a relative ~(nd / 1024
// + 40) 2^-24.
//
// Thread safety: stateless; safe from any thread. Calls that share a scratch
// must be ordered (one stream).

#ifndef WEIR_KERNELS_CUDA_MOE_HC_MIX_SPLIT_H_
#define WEIR_KERNELS_CUDA_MOE_HC_MIX_SPLIT_H_

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/cuda/moe/mhc.h"

typedef struct CUstream_st* cudaStream_t;

namespace weir::kernels::cuda {

// Elements of v per split.
inline constexpr int64_t kHcMixChunk = 1024;
// Tokens per CTA (a group shares a counter); calls of at most
// kHcMixOneTokenCtas tokens (decode) run one token a CTA instead: four times
// the CTAs, each a quarter of the cross-lane sums (same bits either way).
inline constexpr int64_t kHcMixTokensPerCta = 4;
inline constexpr int64_t kHcMixOneTokenCtas = 8;
// Calls of at least kHcMixSplitOnYTokens tokens (prefill chunks) put the
// splits on grid.y and give a CTA kHcMixGroupsPerCta groups of
// kHcMixTokensPerCta tokens in turn, so the CTAs an SM holds share one split's
// hc_fn columns in L1 (the same bits: a token's sums are the same in any
// grid). Its test passes on an H100, but the EP8 prefill chunk was slower
// with it (0.894 s against 0.872, twenty-fourth session), so the decoder
// keeps it off (hc_mix_prefill_grid). The EP8 slice's 4,096-row
// chunk spent 44 ms in this kernel, 0.55 ms a call, about the time to read
// hc_fn from L2 once for every 4 tokens.
inline constexpr int64_t kHcMixSplitOnYTokens = 256;
// HcMixSplitK's token loop: tokens a CTA, and the least call it takes.
inline constexpr int64_t kHcMixLoopTokens = 16;
inline constexpr int64_t kHcMixLoopMinTokens = 64;
inline constexpr int64_t kHcMixGroupsPerCta = 8;

struct HcMixSplitScratch {
  // device, HcMixSplitPartialFloats(tokens, n, dim) floats.
  float* partials = nullptr;
  // device, HcMixSplitCounters(tokens) words, zero before the first call;
  // every call leaves them zero again (so a captured graph can replay).
  uint32_t* counters = nullptr;
};

int64_t HcMixSplitPartialFloats(int64_t tokens, int hc_mult, int64_t dim);
int64_t HcMixSplitCounters(int64_t tokens);

// True when HcMixSplitK takes `p` (HcMixParams::mixes is ignored and hc_fn
// is required): SupportsHcMix, hc_mult 1..4, n*dim a multiple of 4, x and
// hc_fn 16-byte aligned, and splits * token groups < 2^31.
bool SupportsHcMixSplitK(const HcMixParams& p);

// Enqueues the coefficients on `stream`. No allocation, no host
// synchronization: graph-capturable. INVALID_ARGUMENT when
// SupportsHcMixSplitK is false or a scratch pointer is null; INTERNAL with
// the CUDA error if the launch fails.
// `split_on_y_tokens`: calls of at least this many tokens take the prefill
// grid (kHcMixSplitOnYTokens; 0: never, the grid of before). The decoder
// passes 0 unless DeviceDecoderOptions::hc_mix_prefill_grid.
// `transposed_sums`: each warp's sums with the reduction transposed (a lane
// keeps half of its values at each butterfly level and sends the other
// half), the same pairwise sums in the same tree, so the same bits with about
// 2.5x fewer shuffles and adds (the decoder passes
// DeviceDecoderOptions::hc_mix_transposed, on by default).
// `token_loop`: calls of at least kHcMixLoopMinTokens tokens take
// HcMixSplitLoopKernel instead: kHcMixLoopTokens tokens a CTA, each thread's
// hc_fn quads held in registers across them (hc_fn read from L2 once for 16
// tokens instead of 4), the transposed sums; the same bits (GPU-tested, no
// faster at prefill; the decoder passes DeviceDecoderOptions::hc_mix_token_loop,
// off by default). It takes precedence over the
// prefill grid.
absl::Status HcMixSplitK(const HcMixParams& p, const HcMixSplitScratch& scratch,
                         cudaStream_t stream, int64_t split_on_y_tokens = kHcMixSplitOnYTokens,
                         bool transposed_sums = false, bool token_loop = false);

// HcMixTf32: the prompt's form of the same coefficients (the decoder's
// `prompt_tf32_mhc`). Grid (splits, groups of kHcMixTf32Tokens tokens): a CTA
// takes 64 tokens x one kHcMixChunk split and makes its products on mma.sync
// m16n8k8 TF32 tensor cores, each fp32 operand cut as hi = tf32(v) (nearest)
// plus lo = tf32(v - hi) and three products a pair (lo hi, hi lo, hi hi, in
// that order, into one fp32 accumulator a mix), so x is read once a call
// instead of hc_fn once every kHcMixTokensPerCta tokens. Arithmetic, per
// token: each product is v_k w_k to about 2^-21 relative (the lo lo term and
// lo's own rounding left out), summed by the tensor core's fp32 accumulation
// in 8-element steps, a split's two halves added in order, then the splits
// in split order as HcMixSplitK does; sum v^2 as four fma chains a row
// (elements 4 t .. 4 t + 3 of every 16, t the lane's quad index) added over
// the quad (xor 1, 2) and the halves. The finish (scale, split + Sinkhorn)
// is HcMixSplitK's. A token's bits depend on its own row alone: the same in
// every call, at every place in it (batch-invariant), but not HcMixSplitK's
// bits. The tensor core's accumulation does not round to nearest, so over a
// split half's 192 accumulations the errors add up: the coefficients
// measured 1.6e-5 from the CPU's at 4,096 - 5,120 dims (H100, thirty-ninth
// session) where HcMixSplitK's were 3.3e-6.
// `row_role` (optional, device [tokens]): only tokens whose row_role equals
// `role` get pre/post/comb written. `promote`: each 16-element step's six
// products summed from zero by the tensor core, then added to the running
// fp32 sums by FADD (round to nearest), so no long chain rides the tensor
// core's accumulation: other bits than without it, batch-invariant alike
// (built after that run, not yet run on a GPU). `tile_rows` 2: each warp
// takes two m16 tiles (128 tokens a CTA) and makes each step's hc_fn TF32
// pairs once for both (they were 60 of ~140 instructions a step and tile,
// and hc_fn's loads 1.5x x's bytes): the same bits (a row's mma sequence is
// unchanged); built in the forty-third session, not yet run on a GPU.
// Scratch as HcMixSplitK's (the same partial floats; counters for groups of
// 64 tokens, fewer than it needs).
// No allocation, no host synchronization: graph-capturable.
// INVALID_ARGUMENT when SupportsHcMixSplitK is false or a scratch pointer is
// null; INTERNAL with the CUDA error if the launch fails.
inline constexpr int64_t kHcMixTf32Tokens = 64;
absl::Status HcMixTf32(const HcMixParams& p, const HcMixSplitScratch& scratch, cudaStream_t stream,
                       const int32_t* row_role = nullptr, int role = 1, bool promote = false,
                       int tile_rows = 1);

}  // namespace weir::kernels::cuda

#endif  // WEIR_KERNELS_CUDA_MOE_HC_MIX_SPLIT_H_
