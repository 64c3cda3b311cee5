// kernels/cuda/moe/moe_exchange_lsa.h
//
// The expert-parallel exchange of a MoE layer written by the device itself
// into the peers' memory (NCCL's device API over symmetric windows,
// parallel/nccl_symmetric.h), in place of MoeDispatchPack + an NCCL send /
// receive of fixed blocks + CopyRows + an NCCL all-to-all back
// (moe_exchange.h). The layouts on the receiving side are those the NCCL path
// leaves there (the returned rows compacted, below), so everything after the
// exchange is unchanged and the logits are the same bits; what changes is
// what moves:
//   * dispatch: the row x[t] goes to a peer only when one of t's pairs is
//     served there (the NCCL path moves every token's block to every peer:
//     world x tokens x dim floats a rank, most of them unused);
//   * return: each served pair's output goes once, to the rank it came from
//     (the NCCL path moves world x tokens x topk rows a rank, zeros included).
// No NCCL kernel, no host step: both are ordinary kernels, so a step's graph
// captures them as it captures the rest, and each ends at an LSA barrier
// (CTA b of every rank meets at barrier b), after which every rank's writes
// into this rank's windows are visible to the kernels that follow.
//
// MoeDispatchLsa, for each token t of this rank (rank r of world W) and each
// peer p, writes into p's windows at block r:
//     recv_slot   [W, tokens, topk]  local slot of (t, k) on p, else -1
//     recv_weight [W, tokens, topk]  route weight of (t, k) on p, else 0
//     recv_x      [W, tokens, dim]   x[t], only when some (t, k) is on p
// and, locally, return_row [tokens, topk] = t * topk + k (-1 when the pair
// goes nowhere): the row its output will have in `ret` here, whichever rank
// serves it. recv_slot and recv_weight are MoeDispatchPack's values in its
// layout. Tokens at or past *valid_tokens and pairs whose slot is -1 or out
// of range send nothing.
//
// MoeReturnLsa, for each received pair i = (src * tokens + t) * topk + k with
// pair_row[i] >= 0 (the grouped row MoeGroupRows gave it), writes
// y_grouped[pair_row[i]] into src's window `ret` [tokens, topk, dim] at row
// t * topk + k, which MoeCombine reads through return_row (a pair is served
// by exactly one rank, so no row is written twice; the NCCL path keeps a
// block per serving rank, world times the memory). Rows of pairs that go
// nowhere are not written (MoeCombine never reads them).
//
// Both kernels run kMoeLsaCtas CTAs on every rank whatever the token count
// and end at a barrier that pairs CTA b of every rank (its own, over the
// window `barrier` of MoeLsaBarrierBytes(world) zeroed bytes, shared by both
// kernels): NCCL's LSA barrier would wait forever for a dead peer, this one
// leaves once *abort (host memory mapped for the device) is non-zero. Every
// rank must launch the same sequence of these kernels with the same tokens,
// topk and dim.
//
// Thread safety: stateless; safe from any thread.

#ifndef WEIR_KERNELS_CUDA_MOE_MOE_EXCHANGE_LSA_H_
#define WEIR_KERNELS_CUDA_MOE_MOE_EXCHANGE_LSA_H_

#include <nccl.h>
#include <nccl_device/impl/comm__types.h>

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"

typedef struct CUstream_st* cudaStream_t;

namespace weir::kernels::cuda {

inline constexpr int kMoeLsaCtas = 128;       // CTAs of each kernel = LSA barriers used
inline constexpr int kMoeLsaMaxPairs = 1024;  // world * topk per token

// Bytes of the barrier window: an inbox per (CTA, peer) and an epoch per CTA.
inline constexpr size_t MoeLsaBarrierBytes(int world) {
  return static_cast<size_t>(kMoeLsaCtas) * (static_cast<size_t>(world) + 1) * 4;
}

struct MoeDispatchLsaParams {
  const int32_t* slots = nullptr;         // device [tokens, topk] physical slots, -1 = none
  const float* route_weight = nullptr;    // device [tokens, topk]
  const float* x = nullptr;               // device [tokens, dim]
  const int64_t* valid_tokens = nullptr;  // device [1] or null (= tokens)
  ncclWindow_t recv_x = nullptr;          // symmetric [world, tokens, dim] fp32
  ncclWindow_t recv_slot = nullptr;       // symmetric [world, tokens, topk] int32
  ncclWindow_t recv_weight = nullptr;     // symmetric [world, tokens, topk] fp32
  int32_t* return_row = nullptr;          // device out [tokens, topk]
  ncclWindow_t barrier = nullptr;         // symmetric, MoeLsaBarrierBytes(world), zeroed once
  const int32_t* abort = nullptr;         // device-mapped host word, or null (never abort)
  const ncclDevComm* comm = nullptr;      // world, rank and the LSA team's size from it
  int64_t tokens = 0;
  int64_t dim = 0;
  int topk = 0;
  int slots_per_rank = 0;
};

struct MoeReturnLsaParams {
  const float* y_grouped = nullptr;   // device [grouped rows, dim]
  const int32_t* pair_row = nullptr;  // device [world * tokens * topk], -1 = served elsewhere
  ncclWindow_t ret = nullptr;         // symmetric [tokens, topk, dim] fp32
  ncclWindow_t barrier = nullptr;     // as MoeDispatchLsaParams::barrier (the same window)
  const int32_t* abort = nullptr;
  const ncclDevComm* comm = nullptr;
  int64_t tokens = 0;
  int64_t dim = 0;
  int topk = 0;
};

// True for tokens, dim, topk, slots_per_rank >= 1, a comm whose LSA team is
// its world (lsaSize == nRanks), world * topk <= kMoeLsaMaxPairs,
// world * tokens * topk * dim < 2^62 bytes, world * slots_per_rank < 2^31,
// and every array and window non-null (valid_tokens may be null).
bool SupportsMoeDispatchLsa(const MoeDispatchLsaParams& params);
bool SupportsMoeReturnLsa(const MoeReturnLsaParams& params);

// Enqueue one launch each on `stream`. INVALID_ARGUMENT when unsupported;
// INTERNAL on launch failure. A peer that never launches its matching kernel
// leaves this one waiting at the barrier (the step's collective contract).
absl::Status MoeDispatchLsa(const MoeDispatchLsaParams& params, cudaStream_t stream);
absl::Status MoeReturnLsa(const MoeReturnLsaParams& params, cudaStream_t stream);

}  // namespace weir::kernels::cuda

#endif  // WEIR_KERNELS_CUDA_MOE_MOE_EXCHANGE_LSA_H_
