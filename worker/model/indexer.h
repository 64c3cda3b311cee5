// worker/model/indexer.h
//
// The compressed branch of V4.1 attention (spec §4.3.1-§4.3.4):
//   * UpdateCompressedKv (kv sources): compressor (ratio 1 projection, or
//     softmax pooling of `ratio` tokens with the partial group rebuilt from
//     SequenceState), RMSNorm, index keys from the pre-RoPE latent, RoPE at
//     entry position j * ratio, FP4 rounding; appends to the layer's
//     KvSourceState.
//   * SelectCompressed: for index sources, the indexer score against the kv
//     source's own index keys (not the reference's last-published keys, see
//     §4.3.5), the candidate pool (candidate source) or its restriction
//     (Reindex), and the top-k, published in AttentionShared; Reuse layers
//     read their index source's top-k.
//
// Thread safety: functions over caller-owned state.

#ifndef WEIR_WORKER_MODEL_INDEXER_H_
#define WEIR_WORKER_MODEL_INDEXER_H_

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "worker/model/attention.h"

namespace weir::model {

// Appends the entries completed by the chunk ([start_pos/r, end_pos/r)).
// REQUIRES: ctx.role.attention == kFull.
absl::Status UpdateCompressedKv(const AttentionContext& ctx, std::span<const float> x);

// Fills topk [S, width] with compressed entry ids (-1 = empty) for every
// query of the chunk; width = min(index_topk, end_pos / ratio).
// x [S, dim] is the attention input, qr [S, q_lora_rank] the normed query latent.
absl::Status SelectCompressed(const AttentionContext& ctx, std::span<const float> x,
                              std::span<const float> qr, std::vector<int32_t>& topk, int& width);

}  // namespace weir::model

#endif  // WEIR_WORKER_MODEL_INDEXER_H_
