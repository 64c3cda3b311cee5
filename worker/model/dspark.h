// worker/model/dspark.h
//
// The DSpark draft module of V4.1 (spec §4.8): three SWA-only stages
// (mtp.0..2) that draft `dspark_block_size` tokens after the target's token
// t* from the target's features.
//   * UpdateDsparkRings: after every target forward, main_x =
//     main_norm(main_proj(main_hidden)) of each processed position is turned
//     into each stage's window K/V and stored in the stage's ring (this is the
//     reference's prefill seeding, applied to every position: a draft after a
//     multi-token forward sees the same ring as after one-token decodes).
//   * DsparkDraftBatch: block [t*, noise x (B-1)] at positions p+1..p+B attends to
//     ring slots [0, min(W, p+1)) and bidirectionally to itself; mHC + MoE
//     (DSpark experts) per stage; final collapse, norm, head; the Markov head
//     adds a low-rank bigram bias sequentially; confidence = proj([h ; e]).
//     Several sequences draft in one such forward (one row each).
// Drafts are greedy (temperature 0: argmax, first index on ties).
//
// Thread safety: functions over caller-owned state.

#ifndef WEIR_WORKER_MODEL_DSPARK_H_
#define WEIR_WORKER_MODEL_DSPARK_H_

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/model/draft_result.h"
#include "worker/model/model_runtime.h"
#include "worker/model/sequence_state.h"

namespace weir::model {

// Writes the stages' ring rows for positions [start_pos, start_pos + tokens)
// from main_hidden [tokens, dspark_main_dim].
absl::Status UpdateDsparkRings(const ModelRuntime& rt, std::span<const float> main_hidden,
                               int64_t start_pos, int64_t tokens, SequenceState& state);

// Drafts after next_tokens[r] (the target's token for position
// states[r]->length()) for every row r in one forward: the R blocks are
// stacked into [R * B] rows for each stage's mHC, norms and MoE (one expert
// call per stage for all rows), the collapse and the confidence head; each
// block's attention reads its own sequence's ring and its own block, and the
// vocabulary and Markov heads run per row with one row's shapes. Returns one
// result per row, each bit-identical to drafting that row alone (every
// other op is batch-invariant, ops.h). Does not change the states; an empty
// batch returns no results. A failing op fails the whole batch.
// REQUIRES (checked by Model::DraftBatch): states.size() == next_tokens.size(),
// every state non-null with length() >= 2, every token in vocab.
absl::StatusOr<std::vector<DraftResult>> DsparkDraftBatch(
    const ModelRuntime& rt, std::span<const SequenceState* const> states,
    std::span<const int64_t> next_tokens);

}  // namespace weir::model

#endif  // WEIR_WORKER_MODEL_DSPARK_H_
