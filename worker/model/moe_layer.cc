#include "worker/model/moe_layer.h"

#include <vector>

#include "base/status_macros.h"
#include "worker/model/expert_ffn.h"

namespace weir::model {
namespace cpu = ::weir::kernels::cpu;

int64_t MoeExperts(const ModelConfig& config, const LayerRole& role) {
  if (role.is_dspark_stage && config.dspark_n_routed_experts > 0) {
    return config.dspark_n_routed_experts;
  }
  return config.n_routed_experts;
}

int MoeTopk(const ModelConfig& config, const LayerRole& role) {
  if (role.is_dspark_stage && config.dspark_n_activated_experts > 0) {
    return static_cast<int>(config.dspark_n_activated_experts);
  }
  return static_cast<int>(config.n_activated_experts);
}

absl::Status MoeForward(const MoeContext& ctx, std::span<const float> x, int64_t tokens,
                        std::span<const uint8_t> image_mask, std::span<float> out) {
  const ModelConfig& c = ctx.config;
  const int topk = MoeTopk(c, ctx.role);
  cpu::ScoreFunc score = cpu::ScoreFunc::kSqrtSoftplus;
  if (c.score_func == ScoreFunc::kSigmoid) score = cpu::ScoreFunc::kSigmoid;
  if (c.score_func == ScoreFunc::kSoftmax) score = cpu::ScoreFunc::kSoftmax;
  const cpu::MoeGateParams params{.num_experts = static_cast<int>(MoeExperts(c, ctx.role)),
                                  .topk = topk,
                                  .gate_temp = static_cast<float>(c.gate_temp),
                                  .route_scale = static_cast<float>(c.route_scale),
                                  .norm_topk_prob = c.norm_topk_prob,
                                  .score_func = score};
  std::vector<int32_t> indices(tokens * topk);
  std::vector<float> weights(tokens * topk);
  RETURN_IF_ERROR(ctx.ops.MoeGate(
      params, {.x = x, .weight = ctx.weights.gate, .bias = ctx.weights.bias,
               .bias_vl = ctx.weights.bias_vl, .image_mask = image_mask, .indices = indices,
               .weights = weights, .tokens = tokens, .dim = c.dim}));
  const ExpertAssignments assignments{
      .experts = indices, .weights = weights, .tokens = tokens, .topk = topk};
  if (ctx.load != nullptr) ctx.load->Record(ctx.role.layer, assignments);
  RETURN_IF_ERROR(ctx.executor.Dispatch(ctx.role.layer, x, assignments));
  RETURN_IF_ERROR(ctx.executor.RunExperts());
  RETURN_IF_ERROR(ctx.executor.Combine(out));
  std::vector<float> shared(tokens * c.dim);
  RETURN_IF_ERROR(SwigluExpertForward(ctx.ops, ctx.weights.shared, x, tokens, {},
                                      static_cast<float>(c.swiglu_limit), shared));
  for (int64_t i = 0; i < tokens * c.dim; ++i) out[i] += shared[i];
  ctx.ops.RoundBf16(out);
  return absl::OkStatus();
}

}  // namespace weir::model
