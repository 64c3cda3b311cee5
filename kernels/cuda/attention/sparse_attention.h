// kernels/cuda/attention/sparse_attention.h
//
// SparseAttention on the GPU: the CUDA backend of kernels/cpu/sparse_attention.h
// (sparse MQA over per-query index lists into one shared K=V table, with a
// per-head attention sink), same formula:
//   z_t = scale * (q[s,h] . kv[t]) for the valid slots t of index row s,
//   m = max z_t (the sink does not enter m),
//   o = sum_t exp(z_t - m) kv[t] / (sum_t exp(z_t - m) + exp(sink[h] - m)),
// and o = 0 for a row without a valid slot.
//
// Order of operations, the CPU's exactly: each dot product is reduced across
// a warp in the kernels/common/fmath.h LaneSum order (lane c takes channels
// c, c+32, ...; then the fixed xor butterfly), the CPU's fmath::LaneDot; the
// denominator is summed by one thread in list order; the output channel c
// sums p_t * kv[t][c] over the index row in list order, then divides by the
// denominator; exp is fmath::ExpF; no fused multiply-add. Results are
// bit-identical to the CPU reference.
//
// Thread safety: stateless; safe from any thread.

#ifndef WEIR_KERNELS_CUDA_ATTENTION_SPARSE_ATTENTION_H_
#define WEIR_KERNELS_CUDA_ATTENTION_SPARSE_ATTENTION_H_

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/cuda/attention/attention_grouped_out.h"

typedef struct CUstream_st* cudaStream_t;

namespace weir::kernels::cuda {

// Longest index row the launcher takes (its logits and indices live in
// shared memory).
inline constexpr int kSparseAttentionMaxTopk = 4096;

struct SparseAttentionParams {
  const float* q = nullptr;        // device [queries, heads, head_dim]
  const float* kv = nullptr;       // device [kv_len, head_dim]; K and V are the same vector
  const float* sink = nullptr;     // device [heads] attention-sink logits
  const int32_t* index = nullptr;  // device [queries, topk]; entries in [0, kv_len) or -1
  float* out = nullptr;            // device [queries, heads, head_dim]; must not alias q or kv
                                   // (unused with `grouped`)
  int64_t queries = 0;
  int heads = 0;
  int head_dim = 0;
  int64_t kv_len = 0;
  int topk = 0;
  float scale = 0.0f;              // 0 means head_dim^-0.5
  // out rounded to bf16 (nearest even) as fp32 in this launch: the bits of a
  // RoundBf16 pass after it (the fast decoder's bf16 boundary of o).
  bool round_bf16 = false;
  // The same arithmetic, so the same bits, with the listed rows staged in
  // shared memory (up to ~100 KB of them at a time, every load of a chunk in
  // flight together) instead of each output channel walking the list through
  // global memory one dependent load at a time: the decode latency of the
  // fast decoder's unstored pools (small: 34 us a launch at batch 1 on an
  // H100). Taken where SparseAttentionStages says so, else ignored.
  bool staged = false;
  // Heads of one query a staged block takes (0: chosen from the sizes; else
  // 1, 2, 4 or 8, dividing heads). The heads share the query's list and the
  // one K = V table, so grouping them stages each listed row once for all of
  // them; each head's arithmetic is unchanged (the same bits at every
  // value). 0 groups heads while the launch keeps at least 256 blocks.
  int heads_per_block = 0;
  // With the staged kernel: instead of `out`, the output written as the
  // grouped output projection reads it, in this launch: SwapAxes of
  // [queries, heads * head_dim / group_width, group_width] into
  // [groups, queries, group_width] with each head's last rope_dim values
  // rotated back (the inverse RoPE at the query's position, then the bf16
  // boundary when round_bf16), the bits of SwapAxes' RoPE form
  // (kernels/cuda/decode/rows.h) after the plain output. group_width > 0
  // turns it on: a multiple of head_dim dividing heads * head_dim, rope_dim
  // even in (0, head_dim] with head_dim even. With out_bf16 instead of out
  // (one of them), each value leaves as ToBf16's bits of it (kernels/cuda/
  // decode/rows.h), the input a bf16 grouped product reads.
  using GroupedOut = AttentionGroupedOut;  // attention_grouped_out.h
  GroupedOut grouped;
};

// True when a launch with `params` and staged set runs the staged kernel:
// head_dim a multiple of 4 and at most 1,024, kv 16-byte aligned, and one
// row with the logits and the list in shared memory; with `grouped` on, its
// conditions too (else SparseAttention refuses the launch).
bool SparseAttentionStages(const SparseAttentionParams& params);

// The heads a staged block of this launch takes (1, 2, 4 or 8), 0 when the
// launch is not staged.
int SparseAttentionStagedHeads(const SparseAttentionParams& params);

// Returns true if the launcher handles `params`: queries >= 0, heads > 0,
// head_dim > 0, kv_len >= 0, 0 <= topk <= kSparseAttentionMaxTopk,
// queries * heads < 2^31, heads_per_block 0 or a power of two up to 8
// dividing heads, and non-null pointers wherever the sizes make them
// read or written (q, sink, out when queries > 0; index when queries * topk >
// 0; kv when kv_len > 0).
bool SupportsSparseAttention(const SparseAttentionParams& params);

// Enqueues the attention on `stream`; writes every element of out.
// Index entries outside [-1, kv_len) are treated as -1 (never read): the
// device cannot report them, unlike the CPU reference, which returns
// INVALID_ARGUMENT; callers that need that check make it on the host.
// Returns INVALID_ARGUMENT when SupportsSparseAttention is false; INTERNAL
// with the CUDA error if the launch fails. queries == 0 enqueues nothing.
absl::Status SparseAttention(const SparseAttentionParams& params, cudaStream_t stream);

}  // namespace weir::kernels::cuda

#endif  // WEIR_KERNELS_CUDA_ATTENTION_SPARSE_ATTENTION_H_
