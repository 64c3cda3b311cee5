// kernels/cuda/moe/moe_permute.h
//
// The glue around GroupedExpertFfn on the GPU, as the CPU's
// worker/model/local_expert_executor.cc and kernels/cpu/moe_expert.h (Moe)
// arrange it:
//   MoeGroupRows: the (token t, k) pair i = t * topk + k goes to group
//     groups[i] (an expert, or a local slot); within a group the rows are in
//     ascending pair index. Writes the group offsets, each pair's grouped row,
//     and gathers x rows (or their FP8 codes and scales) and route weights
//     into that order. Integer
//     bookkeeping only: exact and deterministic. Padding tokens (at or past
//     *valid_tokens) join no group: a padded decode step does not read the
//     experts its padding rows would route to.
//   MoeCombine: out[t] = ((0 + Y_{e_1}) + Y_{e_2} + ...) + shared[t], over the
//     pairs of t in ascending expert id, fp32 adds, then bf16 if asked: the
//     CPU's combine operation for operation, so bit-identical given equal
//     expert outputs.
//
// Thread safety: stateless; safe from any thread.

#ifndef WEIR_KERNELS_CUDA_MOE_MOE_PERMUTE_H_
#define WEIR_KERNELS_CUDA_MOE_MOE_PERMUTE_H_

#include <cstdint>

#include "absl/status/status.h"

typedef struct CUstream_st* cudaStream_t;

namespace weir::kernels::cuda {

inline constexpr int kMoeGroupRowsMaxGroups = 1024;

struct MoeGroupRowsParams {
  const int32_t* groups = nullptr;      // device [tokens, topk] group of each pair; a value
                                        // outside [0, num_groups) (with token_role:
                                        // [0, role_stride)) is not handled here
                                        // (e.g. a remote expert): its pair_row is -1
  const float* x = nullptr;             // device [tokens, dim]
  const float* route_weight = nullptr;  // device [tokens, topk]; null = no weight gather
  int64_t* group_offsets = nullptr;     // device out [num_groups + 1]
  int32_t* pair_row = nullptr;          // device out [tokens, topk] grouped row or -1
  float* x_grouped = nullptr;           // device out [tokens * topk, dim]; rows past
                                        // group_offsets[num_groups] untouched
  float* weight_grouped = nullptr;      // device out [tokens * topk]; needed iff route_weight
  int64_t tokens = 0;
  int64_t dim = 0;
  int topk = 0;
  int num_groups = 0;
  const int64_t* valid_tokens = nullptr;  // device [1] or null (= tokens): the pairs of
                                          // tokens at or past it (padding rows of a
                                          // padded step) join no group, pair_row -1
  // With `codes`: x's FP8 form (ActQuantFp8's codes [tokens, dim] and UE8M0
  // scales [tokens, dim / 32]) is gathered instead of x: codes_grouped and
  // scales_grouped get the rows ActQuantFp8 of x_grouped would give (its
  // quantization is row by row), and x / x_grouped are not read or written
  // (may be null). Needs dim % 512 == 0 and the four pointers 16-byte aligned.
  const uint8_t* codes = nullptr;
  const uint8_t* scales = nullptr;
  uint8_t* codes_grouped = nullptr;   // device out [tokens * topk, dim]
  uint8_t* scales_grouped = nullptr;  // device out [tokens * topk, dim / 32]
  // Optional with `codes`: also the bf16 values the gathered codes stand
  // for, [tokens * topk, dim] (16-byte aligned): dense::Fp8ActBf16's bits of
  // codes_grouped / scales_grouped, so a product on bf16 X (the experts'
  // bf16 route) needs no widening launch after the gather.
  uint16_t* bf16_grouped = nullptr;
  // Optional: role-major groups. With token_role (device [tokens], 0 or
  // nonzero), pair i of a group g = groups[i] in [0, role_stride) joins group
  // g + role_stride (token_role[i / topk] != 0), and num_groups must be
  // 2 x role_stride: the rows of role-0 tokens first, expert by expert, then
  // those of the others, each group still ascending by pair index. So a
  // product over the first role_stride groups' offsets and another over the
  // next role_stride's cover each role's rows alone (the decoder's FP8
  // experts for generated rows, the bf16 route for a prompt's), and
  // MoeCombine reads them through pair_row as before.
  const int32_t* token_role = nullptr;
  int role_stride = 0;
  // Past 4,096 pairs, number them with each warp of the block taking its
  // own span in parallel (GroupRowsWideKernel) instead of warp after warp of
  // every 1,024 pairs: the same offsets and rows (forty-second session, for
  // the EP8 prefill chunk's 196,608 pairs, where the walk took 216 us a
  // layer on an H200; not yet run on a GPU, so the caller's choice).
  bool wide = false;
};

// True for tokens, dim, topk > 0, dim <= 65535 x 1024 (a row is spread over
// blocks of 1024 columns), 1 <= num_groups <= kMoeGroupRowsMaxGroups,
// tokens * topk < 2^31, non-null groups/group_offsets/pair_row, x/x_grouped
// non-null (or, with codes, the four FP8 arrays non-null and aligned as
// listed, dim % 512 == 0; bf16_grouped only with them, 16-byte aligned),
// weight_grouped non-null when route_weight is, and
// with token_role a role_stride >= 1 with num_groups == 2 x role_stride.
bool SupportsMoeGroupRows(const MoeGroupRowsParams& params);

// Enqueues the grouping (one block) and the gather on `stream`. The result
// feeds GroupedExpertFfn with rows = tokens * topk (an upper bound: no host
// read needed). INVALID_ARGUMENT when unsupported; INTERNAL on launch failure.
absl::Status MoeGroupRows(const MoeGroupRowsParams& params, cudaStream_t stream);

struct MoeCombineParams {
  const float* y_grouped = nullptr;  // device [>= rows used, dim] expert outputs, grouped
  // Instead of y_grouped: the expert outputs as bf16 bits (prefill forms whose
  // outputs are bf16 values: half the bytes); each widened exactly, so the
  // same sums as y_grouped holding the same values.
  const uint16_t* y_grouped_bf16 = nullptr;
  const int32_t* pair_row = nullptr; // device [tokens, topk] from MoeGroupRows (-1: skip)
  const int32_t* experts = nullptr;  // device [tokens, topk] expert ids: the summation order
  const float* shared = nullptr;     // device [tokens, dim] shared expert output; may be null
  float* out = nullptr;              // device out [tokens, dim]; must not overlap the inputs
  int64_t tokens = 0;
  int64_t dim = 0;
  int topk = 0;
  bool round_bf16 = true;            // ActivationPrecision::kBf16
  // Prefill's whole rows (kCombineWholeRowTokens tokens or more): a thread
  // sums 16 bytes of columns of each row at a time (8 bf16 or 4 fp32: one
  // load a row) where dim is a multiple of that and the arrays are 16-byte
  // aligned, instead of a column; each column's additions in the same order,
  // so the same sums. Forty-second session (the combine ran at 1.76 TB/s at
  // the EP8 chunk, H200); not yet run on a GPU, so the caller's choice.
  bool vec16 = false;
};

// True for tokens, dim > 0, dim <= 65535 x 1024, 1 <= topk <= 64, tokens < 2^31,
// exactly one of y_grouped / y_grouped_bf16 and non-null pair_row/experts/out.
bool SupportsMoeCombine(const MoeCombineParams& params);

// Enqueues the combine on `stream`. INVALID_ARGUMENT when unsupported;
// INTERNAL on launch failure.
absl::Status MoeCombine(const MoeCombineParams& params, cudaStream_t stream);

}  // namespace weir::kernels::cuda

#endif  // WEIR_KERNELS_CUDA_MOE_MOE_PERMUTE_H_
