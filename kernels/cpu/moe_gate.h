// kernels/cpu/moe_gate.h
//
// MoE router of DeepSeek-V4.1 (spec §4.5):
//   logits = (x W^T) / gate_temp                       fp32, W [experts, dim] fp32,
//                                                      each dot in fmath::LaneDot order
//   s      = score(logits)                             sqrtsoftplus: sqrt(softplus(l))
//   idx    = top-k of (s + bias)                       bias = bias_vl for image tokens
//   w      = s[idx]; if norm_topk_prob && k > 1: w /= (sum(w) + 1e-20); w *= route_scale
// The bias steers selection only; weights come from the unbiased scores.
// softplus follows torch (beta 1, threshold 20): l > 20 ? l : log1p(exp(l)).
// exp / log1p / sigmoid are kernels/common/fmath.h's (a GPU kernel can match
// them bit for bit).
// Top-k ties go to the lower expert id; the k outputs are ordered by
// descending biased score. sum(w) adds the k weights in that order (fp32).
//
// Thread safety: pure function over caller-owned memory.

#ifndef WEIR_KERNELS_CPU_MOE_GATE_H_
#define WEIR_KERNELS_CPU_MOE_GATE_H_

#include <cstdint>
#include <span>

#include "absl/status/status.h"

namespace weir::kernels::cpu {

enum class ScoreFunc { kSqrtSoftplus, kSigmoid, kSoftmax };

struct MoeGateParams {
  int num_experts = 0;
  int topk = 0;
  float gate_temp = 1.0f;
  float route_scale = 1.5f;
  bool norm_topk_prob = true;
  ScoreFunc score_func = ScoreFunc::kSqrtSoftplus;
};

struct MoeGateArgs {
  std::span<const float> x;            // [tokens, dim]
  std::span<const float> weight;       // [num_experts, dim] fp32
  std::span<const float> bias;         // [num_experts]; empty = zeros
  std::span<const float> bias_vl;      // [num_experts]; empty = use `bias` for all tokens
  std::span<const uint8_t> image_mask; // [tokens] nonzero = inside an image span; may be empty
  std::span<int32_t> indices;          // out [tokens, topk]
  std::span<float> weights;            // out [tokens, topk]
  int64_t tokens = 0;
  int64_t dim = 0;
};

// Routes every token. Returns INVALID_ARGUMENT if topk is not in
// [1, num_experts], gate_temp <= 0, dims are not positive, or any span is
// mis-sized.
absl::Status MoeGate(const MoeGateParams& params, const MoeGateArgs& args);

}  // namespace weir::kernels::cpu

#endif  // WEIR_KERNELS_CPU_MOE_GATE_H_
