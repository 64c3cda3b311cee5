// kernels/cpu/indexer_score.h
//
// Lightning-indexer score of DeepSeek-V4.1 index-source layers (spec §4.3.3):
//   I[s, t] = sum_h relu(q[s, h] . k[t]) * w[s, h]      t < visible_len[s]
//   I[s, t] = -inf                                      t >= visible_len[s]
// q [queries, heads, dim] are the index queries after RoPE and FP4 (MXFP4)
// quantize->dequantize, k [keys, dim] the source layer's index keys (same
// treatment), w [queries, heads] = weights_proj(x) * dim^-0.5 * heads^-0.5,
// all prepared by the caller. Dot products and the head sum are fp32 in index
// order; a tensor-parallel caller sums partial heads across ranks.
//
// Thread safety: pure function over caller-owned memory.

#ifndef WEIR_KERNELS_CPU_INDEXER_SCORE_H_
#define WEIR_KERNELS_CPU_INDEXER_SCORE_H_

#include <cstdint>
#include <span>

#include "absl/status/status.h"

namespace weir::kernels::cpu {

struct IndexerScoreArgs {
  std::span<const float> q;              // [queries, heads, dim]
  std::span<const float> k;              // [keys, dim]
  std::span<const float> weights;        // [queries, heads]
  std::span<const int64_t> visible_len;  // [queries], each in [0, keys]
  std::span<float> out;                  // [queries, keys]
  int64_t queries = 0;
  int heads = 0;
  int dim = 0;
  int64_t keys = 0;
  // Round the per-head dot product, each weighted head term and the head sum
  // to bf16 (round to nearest even), as the reference does in bf16 mode.
  bool round_bf16 = false;
};

// Fills args.out. Returns INVALID_ARGUMENT on mis-sized spans or a
// visible_len outside [0, keys].
absl::Status IndexerScore(const IndexerScoreArgs& args);

}  // namespace weir::kernels::cpu

#endif  // WEIR_KERNELS_CPU_INDEXER_SCORE_H_
