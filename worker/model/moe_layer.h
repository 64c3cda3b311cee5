// worker/model/moe_layer.h
//
// The MoE sublayer of V4.1 (spec §4.5): route with the gate (sqrtsoftplus
// scores, selection-only bias, top-k, normalize, route scale), send the
// routed part through an ExpertExecutor (local or expert-parallel), add the
// shared expert last, round to bf16 as the reference stores it:
//   y = bf16( sum_{k, ascending expert id} bf16(Expert_k(x, w_k)) + bf16(Shared(x)) )
// DSpark stages use their own expert count and top-k (dspark_* config keys).
//
// Thread safety: functions over caller-owned state.

#ifndef WEIR_WORKER_MODEL_MOE_LAYER_H_
#define WEIR_WORKER_MODEL_MOE_LAYER_H_

#include <cstdint>
#include <span>

#include "absl/status/status.h"
#include "worker/model/config.h"
#include "worker/model/expert_executor.h"
#include "worker/model/layer_roles.h"
#include "worker/model/ops.h"
#include "worker/model/weights.h"

namespace weir::model {

// Number of routed experts and experts per token of `layer` (DSpark stages
// use the dspark_* values when set).
int64_t MoeExperts(const ModelConfig& config, const LayerRole& role);
int MoeTopk(const ModelConfig& config, const LayerRole& role);

struct MoeContext {
  Ops& ops;
  const ModelConfig& config;
  const LayerRole& role;
  const MoeWeights& weights;
  ExpertExecutor& executor;
  ExpertLoad* load = nullptr;  // may be null: no counting
};

// out [tokens, dim] = MoE(x [tokens, dim]) (x already ffn_norm'ed).
// image_mask [tokens] (nonzero = image span, selects bias_vl) may be empty.
absl::Status MoeForward(const MoeContext& ctx, std::span<const float> x, int64_t tokens,
                        std::span<const uint8_t> image_mask, std::span<float> out);

}  // namespace weir::model

#endif  // WEIR_WORKER_MODEL_MOE_LAYER_H_
