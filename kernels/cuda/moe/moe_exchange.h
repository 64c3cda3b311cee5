// kernels/cuda/moe/moe_exchange.h
//
// MoeDispatchPack: the sender's side of an expert-parallel MoE layer on device
// buffers, in fixed-capacity blocks so that the exchange (NCCL send/recv of
// constant sizes) can be captured in a CUDA graph. Each of this rank's pairs
// (t, k) has a physical slot (ExpertSlots of moe_gate.h picks the replica),
// living on rank dest = slot / slots_per_rank as local slot
// slot mod slots_per_rank. The kernel writes, for every peer p (this rank
// included), a block of `tokens` rows:
//     send_x      [world, tokens, dim]   x[t] (only rows with a pair on p are
//                                        written; others keep stale values)
//     send_slot   [world, tokens, topk]  local slot of (t, k) on p, else -1
//     send_weight [world, tokens, topk]  route weight of (t, k) on p, else 0
// and, per pair, the row its expert output will occupy in the blocks that
// come back (returned layout [world, tokens, topk, dim], block p from peer p):
//     return_row  [tokens, topk]         (dest * tokens + t) * topk + k
// Tokens at or past *valid_tokens (padding rows) and pairs whose slot is -1
// or outside [0, world * slots_per_rank) send nothing: slot -1 in every block
// and return_row -1.
//
// The receiving side needs nothing new: the received [world * tokens] rows
// feed MoeGroupRows (groups = the received slots, num_groups =
// slots_per_rank), the expert products run grouped, CopyRows with the
// pair_row of MoeGroupRows as source rows packs the outputs into the return
// blocks (row -1 -> zeros), and MoeCombine with `return_row` as pair_row sums
// each token's outputs in ascending expert id: the single-rank arithmetic,
// bit for bit.
//
// Thread safety: stateless; safe from any thread.

#ifndef WEIR_KERNELS_CUDA_MOE_MOE_EXCHANGE_H_
#define WEIR_KERNELS_CUDA_MOE_MOE_EXCHANGE_H_

#include <cstdint>

#include "absl/status/status.h"

typedef struct CUstream_st* cudaStream_t;

namespace weir::kernels::cuda {

inline constexpr int kMoeDispatchMaxPairs = 1024;  // world * topk per token

struct MoeDispatchPackParams {
  const int32_t* slots = nullptr;         // device [tokens, topk] physical slots, -1 = none
  const float* route_weight = nullptr;    // device [tokens, topk]
  const float* x = nullptr;               // device [tokens, dim]
  const int64_t* valid_tokens = nullptr;  // device [1] or null (= tokens)
  float* send_x = nullptr;                // device out [world, tokens, dim]
  int32_t* send_slot = nullptr;           // device out [world, tokens, topk]
  float* send_weight = nullptr;           // device out [world, tokens, topk]
  int32_t* return_row = nullptr;          // device out [tokens, topk]
  int64_t tokens = 0;
  int64_t dim = 0;
  int topk = 0;
  int world = 0;
  int slots_per_rank = 0;
};

// True for tokens, dim, topk, world, slots_per_rank >= 1,
// world * topk <= kMoeDispatchMaxPairs, world * tokens * topk < 2^31,
// world * slots_per_rank < 2^31 and every array non-null (valid_tokens may be
// null). Device contents are not checked here (see above: a bad slot sends
// nothing, never an out-of-bounds access).
bool SupportsMoeDispatchPack(const MoeDispatchPackParams& params);

// Enqueues the packing on `stream` (one launch). INVALID_ARGUMENT when
// unsupported; INTERNAL on launch failure.
absl::Status MoeDispatchPack(const MoeDispatchPackParams& params, cudaStream_t stream);

// AccumulateExpertLoad: the load counters of a MoE layer, kept on the device
// (graph-safe: fixed addresses, integer atomics, so the totals do not depend
// on the order). For the pairs of tokens before *valid_tokens:
//   routed[e] += pairs routed to logical expert e (ids outside
//                [0, num_experts) are not counted);
//   served[0] += group_offsets[num_groups] (the pairs grouped for the local
//                experts, which an expert-parallel layer receives from every
//                rank) when group_offsets is given, else the pairs counted in
//                routed (every expert local).
struct AccumulateExpertLoadParams {
  const int32_t* experts = nullptr;        // device [tokens, topk] logical expert ids
  const int64_t* valid_tokens = nullptr;   // device [1] or null (= tokens)
  const int64_t* group_offsets = nullptr;  // device [num_groups + 1] or null
  int64_t* routed = nullptr;               // device in/out [num_experts]
  int64_t* served = nullptr;               // device in/out [1]; may be null
  int64_t tokens = 0;
  int topk = 0;
  int num_experts = 0;
  int num_groups = 0;                      // with group_offsets
};

// True for tokens, topk, num_experts >= 1, tokens * topk < 2^31, non-null
// experts and routed, and num_groups >= 1 when group_offsets is given.
bool SupportsAccumulateExpertLoad(const AccumulateExpertLoadParams& params);

// Enqueues the counting on `stream` (one block). INVALID_ARGUMENT when
// unsupported; INTERNAL on launch failure.
absl::Status AccumulateExpertLoad(const AccumulateExpertLoadParams& params, cudaStream_t stream);

}  // namespace weir::kernels::cuda

#endif  // WEIR_KERNELS_CUDA_MOE_MOE_EXCHANGE_H_
