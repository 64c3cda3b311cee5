// kernels/cpu/sparse_attention.h
//
// Sparse MQA with a per-head attention sink (spec §4.3 step 6): every query
// row attends to its own index list into one shared K=V table.
//   for head h, query s, valid slots I = {t in idx[s] : t != -1}:
//     z_t = scale * (q[s,h] . kv[t])             scale = head_dim^-0.5 by default
//     m   = max_{t in I} z_t                     (the sink does not enter m)
//     o   = sum_t exp(z_t - m) kv[t] / (sum_t exp(z_t - m) + exp(sink[h] - m))
// An all-empty row gives o = 0. Dot products are fp32 in the
// kernels/common/fmath.h LaneDot order (32 strided lanes, then a fixed
// butterfly: the order a warp reproduces); the denominator and the outputs
// sum in index-list order; exp is fmath::ExpF. The inverse RoPE of the output
// (§4.3 step 7) and the bf16 rounding are the caller's.
//
// Thread safety: pure function over caller-owned memory.

#ifndef WEIR_KERNELS_CPU_SPARSE_ATTENTION_H_
#define WEIR_KERNELS_CPU_SPARSE_ATTENTION_H_

#include <cstdint>
#include <span>

#include "absl/status/status.h"

namespace weir::kernels::cpu {

struct SparseAttentionArgs {
  std::span<const float> q;        // [queries, heads, head_dim]
  std::span<const float> kv;       // [kv_len, head_dim]; K and V are the same vector
  std::span<const float> sink;     // [heads] attn_sink logits
  std::span<const int32_t> index;  // [queries, topk]; entries in [0, kv_len) or -1
  std::span<float> out;            // [queries, heads, head_dim]
  int64_t queries = 0;
  int heads = 0;
  int head_dim = 0;
  int64_t kv_len = 0;
  int topk = 0;
  float scale = 0.0f;              // 0 means head_dim^-0.5
};

// Computes args.out. Returns INVALID_ARGUMENT on mis-sized spans,
// non-positive heads/head_dim, or an index outside [-1, kv_len).
absl::Status SparseAttention(const SparseAttentionArgs& args);

// Builds the sliding-window index rows of the reference (spec §4.3 step 3)
// for `queries` tokens at positions start_pos .. start_pos+queries-1:
//   start_pos == 0 (one prefill chunk): row i lists chunk rows
//     max(0, i-window+1) .. i, padded with -1 to min(queries, window) entries;
//   start_pos > 0 (one decode token): the ring slots oldest first
//     ((start_pos+1) % window .. window-1, then 0 .. start_pos % window),
//     -1 for slots past start_pos (ring still filling).
// `out` is [queries, width] with width = min(queries, window) for prefill and
// window for decode. Returns INVALID_ARGUMENT for decode with queries != 1.
absl::Status WindowIndices(int64_t start_pos, int64_t queries, int window, std::span<int32_t> out);

// Builds the index rows of a DSpark draft block (spec §4.8): each of the
// `block` queries sees ring slots 0 .. min(window, start_pos+1)-1 of the
// stage's window cache and all `block` draft entries, stored after the ring
// (kv = [ring (window rows); block rows]): row = [0 .. n_ring-1, window ..
// window+block-1]. `out` is [block, n_ring + block]. INVALID_ARGUMENT if
// start_pos < 1 (prefill only seeds the ring) or sizes mismatch.
absl::Status DsparkIndices(int64_t start_pos, int window, int block, std::span<int32_t> out);

}  // namespace weir::kernels::cpu

#endif  // WEIR_KERNELS_CPU_SPARSE_ATTENTION_H_
