// tools/bench/decode_floor.h
//
// The bytes one decode step must read, counted in the model's stored form —
// the honest memory floor of a decode step (the fast numerics read exactly
// this; the reference kernels read fp32 expansions of it):
//   * dense weights as the checkpoint stores them (FP8 e4m3 + one E8M0 byte
//     per 32 x 32 tile, bf16, f32; worker/model/checkpoint_layout.h), every
//     backbone layer, the final norm and the head, read once per step;
//   * the routed experts the batch hits (MXFP4: half a byte per weight + one
//     E8M0 byte per 32), each hit expert read once;
//   * per sequence: its embedding row, and the KV the attention reads at its
//     position in the cache's format — the sliding window (FP8 + UE8M0 per
//     32), the selected compressed entries (FP4 e2m1 + E4M3 per 16, at most
//     index_topk of them) and, on the layers that own an indexer, every
//     visible index key (MXFP4 rounded: FP4 + E8M0 per 32).
// Not counted (small next to the above, so the floor is a lower bound): DSpark
// stages (no speculation in these steps), Engram table rows (a few KB per
// token), activations, the compressor's partial group.
//
// Thread safety: pure functions.

#ifndef WEIR_TOOLS_BENCH_DECODE_FLOOR_H_
#define WEIR_TOOLS_BENCH_DECODE_FLOOR_H_

#include <cstdint>

#include "worker/model/config.h"

namespace weir::bench {

struct StoredWeightBytes {
  double dense = 0;       // read in full every step (backbone + norm + head)
  double per_expert = 0;  // one routed expert of one layer (w1, w2, w3 + scales)
  double embed_row = 0;   // one row of the embedding
};

// Stored-form weight bytes of `config` (ValidateModelConfig must pass).
StoredWeightBytes CountStoredWeights(const model::ModelConfig& config);

// Stored-form KV bytes one sequence's decode step reads at `position`
// (0-based position of the token being decoded) over all layers.
double StoredKvBytes(const model::ModelConfig& config, int64_t position);

// Expected distinct experts hit by `tokens` tokens that each pick `per_token`
// distinct experts out of `experts` uniformly at random:
// experts * (1 - (1 - per_token/experts)^tokens). One token hits per_token.
double ExpectedExpertsHit(int64_t experts, int64_t per_token, int64_t tokens);

// Model FLOPs of one token of a prefill chunk at `position` (matmul
// multiply-adds count 2): every backbone matrix (dense linears, the shared
// expert, the gate) once, n_activated_experts routed experts, the sparse
// attention's QK^T and PV over the window and the selected compressed
// entries, the indexer's scores over every visible key of its layer; not the
// head (a prefill chunk's logits are its last row's), Engram, norms, mHC's
// small mixes. The prefill "model FLOPs" of MFU reports.
double PrefillFlopsPerToken(const model::ModelConfig& config, int64_t position);

// The whole floor of a step of `batch` sequences all at `position`:
// dense + per_expert * layers * ExpectedExpertsHit(experts, top_k, batch)
// + batch * (embed_row + StoredKvBytes).
double StoredStepBytes(const model::ModelConfig& config, int batch, int64_t position);

}  // namespace weir::bench

#endif  // WEIR_TOOLS_BENCH_DECODE_FLOOR_H_
