// worker/model/attention.h
//
// The attention sublayer of DeepSeek-V4.1 (spec §4.3): low-rank query, one
// shared K=V head per token in a sliding window (SWA ring), plus for ratio > 0
// layers the compressed KV of the layer's kv source with a per-query top-k
// chosen by the index source's indexer (§4.3.1-§4.3.4), sparse attention with
// per-head sink, inverse RoPE and the grouped low-rank output projection.
// Cross-layer sharing follows LayerRoles (§4.2, §4.3.5): kv sources write the
// compressed KV and index keys into the SequenceState; index sources publish
// their top-k, the candidate source its block pool, in AttentionShared (one
// per forward); Reuse / Reindex layers read them.
//
// A chunk of S tokens at start_pos equals its tokens run one at a time: each
// query sees exactly the window positions and compressed entries it would see
// alone, in the same order, and every op is batch-invariant (ops.h).
// Each indexer scores its own kv source's index keys (the reference's decode
// quirk of reading the last published keys, §4.3.5, is not reproduced).
//
// Thread safety: functions over caller-owned state; no globals.

#ifndef WEIR_WORKER_MODEL_ATTENTION_H_
#define WEIR_WORKER_MODEL_ATTENTION_H_

#include <cstdint>
#include <map>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "kernels/cpu/rope.h"
#include "worker/model/config.h"
#include "worker/model/layer_roles.h"
#include "worker/model/ops.h"
#include "worker/model/sequence_state.h"
#include "worker/model/weights.h"

namespace weir::model {

// Per-forward slots shared down the layer stack (spec §4.3.5).
struct AttentionShared {
  // Top-k compressed positions per index-source layer: [tokens, width], -1 = empty.
  std::map<int, std::vector<int32_t>> topk;
  std::map<int, int> topk_width;
  // Candidate pool of the candidate source: [tokens, pool_width], 1 = kept.
  std::vector<uint8_t> candidates;
  int64_t pool_width = 0;
};

struct AttentionContext {
  Ops& ops;
  const ModelConfig& config;
  const LayerRole& role;
  const AttentionWeights& weights;
  const kernels::cpu::RopeTable& rope;  // the layer's table (theta / YaRN by ratio)
  SequenceState& state;
  AttentionShared& shared;
  int64_t start_pos = 0;  // position of the first token
  int64_t tokens = 0;     // S
};

// Runs attention for x [S, dim] (collapsed, attn_norm'ed, bf16 values) and
// writes out [S, dim]; updates the layer's SWA ring and, for kv sources, the
// compressed KV / index keys in ctx.state. A CED decoder layer's window
// starts at ctx.state.replay_start() (bounded replay, §4.4): query p sees
// SWA positions [max(replay_start, p - window + 1), p]. Errors: INTERNAL on
// broken invariants (inputs are validated by the model), e.g. a decoder
// layer run before the replay start.
absl::Status AttentionForward(const AttentionContext& ctx, std::span<const float> x,
                              std::span<float> out);

// --- pieces shared with the DSpark stages (dspark.cc)

// qr [S, q_lora_rank] = q_norm(wq_a x), q [S, heads, head_dim] with RoPE at
// `positions`; all bf16-rounded as the reference stores them.
absl::Status ProjectQuery(Ops& ops, const ModelConfig& config, const AttentionWeights& w,
                          const kernels::cpu::RopeTable& rope, std::span<const float> x,
                          std::span<const int64_t> positions, std::vector<float>& qr,
                          std::vector<float>& q);

// kv [S, head_dim] = FP8(RoPE(kv_norm(wkv x))) at `positions` (window KV, §4.3 step 2).
absl::Status ProjectWindowKv(Ops& ops, const ModelConfig& config, const AttentionWeights& w,
                             const kernels::cpu::RopeTable& rope, std::span<const float> x,
                             std::span<const int64_t> positions, std::vector<float>& kv);

// Sparse attention over `table` [rows, head_dim] with `index` [S, width],
// inverse RoPE at `positions`, grouped output and wo_b into out [S, dim].
absl::Status AttendAndProject(Ops& ops, const ModelConfig& config, const AttentionWeights& w,
                              const kernels::cpu::RopeTable& rope, std::span<const float> q,
                              std::span<const float> table, std::span<const int32_t> index,
                              int width, std::span<const int64_t> positions,
                              std::span<float> out);

}  // namespace weir::model

#endif  // WEIR_WORKER_MODEL_ATTENTION_H_
