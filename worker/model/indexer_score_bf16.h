// worker/model/indexer_score_bf16.h
//
// The indexer score with the reference's bf16 storage points (spec §4.3.3;
// the reference computes it as bf16 einsum / relu / product / head-sum):
//   dot[s,h,t] = bf16(q[s,h] . k[t])                 fp32 dot, index order
//   I[s,t]     = bf16( sum_h bf16(relu(dot) * w[s,h]) )   fp32 sum, h ascending
//   I[s,t]     = -inf for t >= visible_len[s]
// kernels/cpu:indexer_score computes the same sum entirely in fp32; the
// rounding matters because bf16 scores tie often and ties decide the top-k.
// (Model-local kernel: kernels/cpu has no bf16 variant.)
//
// Thread safety: pure function over caller-owned memory.

#ifndef WEIR_WORKER_MODEL_INDEXER_SCORE_BF16_H_
#define WEIR_WORKER_MODEL_INDEXER_SCORE_BF16_H_

#include "absl/status/status.h"
#include "kernels/cpu/indexer_score.h"

namespace weir::model {

// Fills args.out. INVALID_ARGUMENT on mis-sized spans or a visible_len
// outside [0, keys] (same contract as kernels::cpu::IndexerScore).
absl::Status IndexerScoreBf16(const kernels::cpu::IndexerScoreArgs& args);

}  // namespace weir::model

#endif  // WEIR_WORKER_MODEL_INDEXER_SCORE_BF16_H_
