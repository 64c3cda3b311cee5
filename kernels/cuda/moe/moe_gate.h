// kernels/cuda/moe/moe_gate.h
//
// MoE routing on the GPU: the CUDA backend of kernels/cpu/moe_gate.h (spec
// §4.5), plus the map from chosen logical experts to physical slots.
//
// MoeGate, per token (one thread block each, so results never depend on the
// other tokens of the call):
//   logits = (x W^T) / gate_temp      dot products: each lane of a warp sums
//                                     its strided share of dim (fma, ascending),
//                                     then a fixed xor-butterfly over lanes
//   s      = score(logits)            exp / log1p in double, rounded to fp32
//   idx    = top-k of (s + bias)      bias_vl for image tokens; ties go to the
//                                     lower expert id; outputs in descending
//                                     biased score, exactly as the CPU orders them
//   w      = s[idx]; if norm && k > 1: w /= (sum_k w + 1e-20); w *= route_scale
//                                     (sum in output order, fp32, as the CPU)
// The logits are summed by a warp in the CPU's fmath::LaneDot order (separate
// multiply and add), and exp / log1p / sigmoid are kernels/common/fmath.h's,
// so logits, selection (ties included) and weights are bit-identical to the
// CPU reference.
//
// ExpertSlots, per (token t, k): the chosen logical expert e goes to replica
// (t + rank) mod replicas(e) of e's slots in ascending slot order, as
// worker/model/expert_placement.h specifies.
//
// Thread safety: stateless; safe from any thread.

#ifndef WEIR_KERNELS_CUDA_MOE_MOE_GATE_H_
#define WEIR_KERNELS_CUDA_MOE_MOE_GATE_H_

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"

typedef struct CUstream_st* cudaStream_t;

namespace weir::kernels::cuda {

// Mirrors kernels::cpu::ScoreFunc.
enum class GateScore { kSqrtSoftplus, kSigmoid, kSoftmax };

inline constexpr int kMoeGateMaxExperts = 1024;
inline constexpr int kMoeGateMaxTopk = 64;

struct MoeGateParams {
  const float* x = nullptr;             // device [tokens, dim]
  const float* weight = nullptr;        // device [num_experts, dim] fp32
  // device [tokens, num_experts]: x W^T computed by the caller
  // (MoeGateLogits); then x and weight are not read and only the rest of the
  // gate runs. Null: the logits here, one block per token, as above.
  const float* logits = nullptr;
  const float* bias = nullptr;          // device [num_experts]; null = zeros
  const float* bias_vl = nullptr;       // device [num_experts]; null = `bias` for all tokens
  const uint8_t* image_mask = nullptr;  // device [tokens], nonzero = image token; may be null
  int32_t* indices = nullptr;           // device out [tokens, topk]
  float* weights = nullptr;             // device out [tokens, topk]
  int64_t tokens = 0;
  int64_t dim = 0;
  int num_experts = 0;
  int topk = 0;
  float gate_temp = 1.0f;
  float route_scale = 1.5f;
  bool norm_topk_prob = true;
  GateScore score = GateScore::kSqrtSoftplus;
  // With the logits summed here (logits null): a block of 1,024 threads, so
  // up to 32 experts each get a warp of their own instead of 8 warps taking
  // them in turn (a decode step's latency; the same bits: every logit is
  // still one warp's WarpLaneSum, and nothing else depends on the block).
  bool wide_block = false;
};

// Returns true if MoeGate handles `params`: tokens, dim > 0; 1 <= num_experts
// <= kMoeGateMaxExperts; 1 <= topk <= min(num_experts, kMoeGateMaxTopk);
// gate_temp > 0; indices, weights and either logits or x and weight non-null.
bool SupportsMoeGate(const MoeGateParams& params);

// Enqueues the routing of every token on `stream`. INVALID_ARGUMENT when
// SupportsMoeGate is false; INTERNAL with the CUDA error if the launch fails.
absl::Status MoeGate(const MoeGateParams& params, cudaStream_t stream);

// MoeGateLogits: logits[t, e] = x[t] . W[e] in MoeGate's order (the CPU's
// LaneDot: bit-identical), one warp per (token, expert) instead of one block
// per token, so a small batch fills the GPU; MoeGate with `logits` then does
// the rest. Used by the `fast` decode path (a gate whose logits moved by one
// rounding would flip near-tie expert choices of the reference).
struct MoeGateLogitsParams {
  const float* x = nullptr;       // device [tokens, dim]
  const float* weight = nullptr;  // device [num_experts, dim]
  float* logits = nullptr;        // device out [tokens, num_experts]
  int64_t tokens = 0;
  int64_t dim = 0;
  int num_experts = 0;
};
// INVALID_ARGUMENT unless tokens, dim > 0, 1 <= num_experts <=
// kMoeGateMaxExperts, tokens * num_experts < 2^31 * 8 and non-null arrays;
// INTERNAL if the launch fails.
absl::Status MoeGateLogits(const MoeGateLogitsParams& params, cudaStream_t stream);

// Replica slots of one layer in CSR form: the slots of logical expert e are
// slots[offsets[e] .. offsets[e+1]), ascending.
struct ReplicaTable {
  std::vector<int32_t> offsets;  // [num_logical + 1]
  std::vector<int32_t> slots;    // [num_physical]
};

// Builds the table from one layer's physical_to_logical [num_physical] (slot
// p holds that logical expert). INVALID_ARGUMENT on an id outside
// [0, num_logical) or a logical expert without a slot.
absl::Status BuildReplicaTable(std::span<const int32_t> physical_to_logical, int num_logical,
                               ReplicaTable* table);

struct ExpertSlotsParams {
  const int32_t* indices = nullptr;          // device [tokens, topk] logical experts
  const int32_t* replica_offsets = nullptr;  // device [num_logical + 1] (ReplicaTable)
  const int32_t* replica_slots = nullptr;    // device [offsets[num_logical]] (ReplicaTable)
  int32_t* slots = nullptr;                  // device out [tokens, topk] physical slots
  int32_t* bad_count = nullptr;  // device [1], optional: += pairs whose expert was out of
                                 // range or had no slot (their slot is written as -1)
  int64_t tokens = 0;
  int topk = 0;
  int num_logical = 0;
  int rank = 0;                  // this rank (the replica rotation)
};

// True for tokens, topk, num_logical > 0, rank >= 0 and non-null arrays
// (bad_count may be null).
bool SupportsExpertSlots(const ExpertSlotsParams& params);

// Enqueues slots[t, k] = replica_slots[offsets[e] + (t + rank) mod replicas(e)],
// e = indices[t, k], on `stream`. Device data cannot be validated before the
// launch: a bad expert id yields slot -1 and is counted in bad_count.
// INVALID_ARGUMENT when SupportsExpertSlots is false; INTERNAL on launch failure.
absl::Status ExpertSlots(const ExpertSlotsParams& params, cudaStream_t stream);

}  // namespace weir::kernels::cuda

#endif  // WEIR_KERNELS_CUDA_MOE_MOE_GATE_H_
