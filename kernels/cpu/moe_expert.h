// kernels/cpu/moe_expert.h
//
// Clamped SwiGLU experts and the MoE combine of DeepSeek-V4.1 (spec §4.5):
//   h      = silu(min(w1 x, L)) * clamp(w3 x, -L, L)     L = swiglu_limit (10)
//   Expert = w2(route_weight * h)                        weight applied BEFORE w2
//   y      = sum over routed experts (ascending expert id) + Shared(x)
// silu(g) = g / (1 + exp(-g)) in fp32. Each linear is cpu::Linear (FP8/MXFP4
// weights quantize their input to FP8 blocks of 32). With `bf16_boundaries`
// the tensors the reference keeps in bf16 are rounded to bf16 (nearest even)
// at the same points: w1 x, w3 x, the w2 input, each expert's output and the
// final y; the sum itself is accumulated in fp32 like the reference.
//
// Thread safety: pure functions over caller-owned memory.

#ifndef WEIR_KERNELS_CPU_MOE_EXPERT_H_
#define WEIR_KERNELS_CPU_MOE_EXPERT_H_

#include <cstdint>
#include <span>

#include "absl/status/status.h"
#include "kernels/cpu/linear.h"

namespace weir::kernels::cpu {

// One expert: w1, w3 [inter, dim], w2 [dim, inter]. Non-owning.
struct ExpertWeights {
  LinearWeight w1;
  LinearWeight w2;
  LinearWeight w3;
};

struct SwigluExpertArgs {
  std::span<const float> x;             // [rows, dim]
  std::span<const float> route_weight;  // [rows]; empty = 1
  std::span<float> y;                   // [rows, dim]
  int64_t rows = 0;
  float swiglu_limit = 10.0f;           // <= 0 disables both clamps
  bool bf16_boundaries = true;
};

// Runs one expert over `rows` tokens. Returns INVALID_ARGUMENT on inconsistent
// weight shapes or spans (and Linear's errors).
absl::Status SwigluExpert(const ExpertWeights& expert, const SwigluExpertArgs& args);

struct MoeArgs {
  std::span<const float> x;                       // [tokens, dim]
  std::span<const int32_t> indices;               // [tokens, topk] from MoeGate
  std::span<const float> weights;                 // [tokens, topk] from MoeGate
  std::span<const ExpertWeights* const> experts;  // [num_experts]; null = not held here
  const ExpertWeights* shared = nullptr;          // may be null (no shared expert)
  std::span<float> y;                             // [tokens, dim]
  int64_t tokens = 0;
  int topk = 0;
  float swiglu_limit = 10.0f;
  bool bf16_boundaries = true;
};

// Computes y = sum_k Expert_{idx_k}(x, w_k) + Shared(x). Routed experts that
// are null contribute nothing (a partial sum, as on one expert-parallel rank).
// Returns INVALID_ARGUMENT on an index outside [0, num_experts) or bad shapes.
absl::Status Moe(const MoeArgs& args);

}  // namespace weir::kernels::cpu

#endif  // WEIR_KERNELS_CPU_MOE_EXPERT_H_
