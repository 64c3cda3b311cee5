// worker/model/expert_ffn.h
//
// One clamped SwiGLU expert of V4.1 (spec §4.5) over DenseWeight through the
// Ops interface, with the reference's bf16 boundaries:
//   g = bf16(w1 x), u = bf16(w3 x)              (FP8 activation for FP8/FP4 weights)
//   h = silu(min(g, L)) * clamp(u, -L, L)        fp32, silu(g) = g / (1 + exp(-g))
//   y = bf16(w2(bf16(route_weight * h)))
// Same arithmetic as kernels/cpu/moe_expert.h (SwigluExpert), which takes
// stored-format weights; this one takes the backend's dequantized weights.
//
// Thread safety: pure function over caller-owned memory (uses `ops`).

#ifndef WEIR_WORKER_MODEL_EXPERT_FFN_H_
#define WEIR_WORKER_MODEL_EXPERT_FFN_H_

#include <cstdint>
#include <span>

#include "absl/status/status.h"
#include "worker/model/ops.h"
#include "worker/model/weights.h"

namespace weir::model {

// y [rows, dim] = Expert(x [rows, dim]); route_weight [rows] or empty (= 1).
// swiglu_limit <= 0 disables the clamps. INVALID_ARGUMENT on bad shapes.
absl::Status SwigluExpertForward(Ops& ops, const ExpertWeightsF32& expert,
                                 std::span<const float> x, int64_t rows,
                                 std::span<const float> route_weight, float swiglu_limit,
                                 std::span<float> y);

}  // namespace weir::model

#endif  // WEIR_WORKER_MODEL_EXPERT_FFN_H_
