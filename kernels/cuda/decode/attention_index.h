// kernels/cuda/decode/attention_index.h
//
// Index glue of sparse attention in a device-resident decode step: the rows
// of KV-pool entry numbers that kernels/cuda/attention SparseAttention reads
// (sliding window + selected compressed entries), and the candidate-pool
// restriction of the indexer scores before top-k (worker/model/indexer.cc).
// Integer results are exact; MaskScores writes -inf exactly where the CPU
// does.
//
// Every launcher validates its host-side parameters (INVALID_ARGUMENT),
// enqueues on `stream`, never synchronizes and never allocates (CUDA-graph
// capturable); INTERNAL carries the CUDA error if a launch fails. Element
// counts of 0 enqueue nothing.
//
// Thread safety: stateless; safe from any thread.

#ifndef WEIR_KERNELS_CUDA_DECODE_ATTENTION_INDEX_H_
#define WEIR_KERNELS_CUDA_DECODE_ATTENTION_INDEX_H_

#include <cstdint>

#include "absl/status/status.h"

typedef struct CUstream_st* cudaStream_t;

namespace weir::kernels::cuda::decode {

// ---- AssembleIndex ----------------------------------------------------------

// Builds the sparse-attention index rows of a batched decode step over one KV
// pool (ww = window_width, kw = k_width):
//   out[t, j]      = window[t, j] < 0 ? -1 : window[t, j] + window_base              j < ww
//   out[t, ww + k] = topk[t, k] < 0 ? -1 : topk_row_base[t] + topk_base + topk[t, k]  k < kw
// or, with a block table (a paged pool of blocks of e = entries_per_block
// entries; topk_row_base unused), with b = block_table[table_slot[t] *
// table_width + topk[t, k] / e]:
//   out[t, ww + k] = topk[t, k] < 0 || b < 0 ? -1 : b * e + topk_base + topk[t, k] % e
// (-1 too for a negative table_slot[t] or topk[t, k] / e >= table_width).
// Sums are 32-bit two's complement (they wrap rather than trap; callers keep
// pool entry numbers below 2^31). Device values are not range-checked: any
// non-negative entry passes through, offset.
struct AssembleIndexParams {
  const int32_t* window = nullptr;         // device [rows, window_width], -1 = unused slot
  const int32_t* topk = nullptr;           // device [rows, k_width] entry numbers or -1; may be null iff k_width == 0
  const int32_t* topk_row_base = nullptr;  // device [rows]; may be null iff k_width == 0
  const int32_t* block_table = nullptr;    // device [slots, table_width]; null: topk_row_base
  const int32_t* table_slot = nullptr;     // device [rows] with block_table
  int table_width = 0, entries_per_block = 0;
  int32_t* out = nullptr;                  // device [rows, window_width + k_width]
  int64_t rows = 0;
  int window_width = 0, k_width = 0;
  int32_t window_base = 0, topk_base = 0;
};

// Returns true if AssembleIndex handles `p`: rows, window_width, k_width >= 0
// and, when rows * (window_width + k_width) > 0: non-null out, window when
// window_width > 0, topk and topk_row_base (or block_table, table_slot,
// table_width > 0 and entries_per_block > 0) when k_width > 0.
bool SupportsAssembleIndex(const AssembleIndexParams& p);

// Enqueues the assembly on `stream`. INVALID_ARGUMENT when
// SupportsAssembleIndex is false; INTERNAL with the CUDA error if the launch
// fails. REQUIRES: out does not overlap the inputs.
absl::Status AssembleIndex(const AssembleIndexParams& p, cudaStream_t stream);

// ---- MaskScores -------------------------------------------------------------

// scores[i] = keep[i] ? scores[i] : -inf (keep[i] != 0 keeps), in place: the
// candidate-pool restriction of worker/model/indexer.cc before top-k.
struct MaskScoresParams {
  float* scores = nullptr;        // device [n], in/out
  const uint8_t* keep = nullptr;  // device [n]
  int64_t n = 0;
};

// Returns true if MaskScores handles `p`: n >= 0, scores and keep non-null
// when n > 0.
bool SupportsMaskScores(const MaskScoresParams& p);

// Enqueues the masking on `stream`. INVALID_ARGUMENT when SupportsMaskScores
// is false; INTERNAL with the CUDA error if the launch fails.
absl::Status MaskScores(const MaskScoresParams& p, cudaStream_t stream);

}  // namespace weir::kernels::cuda::decode

#endif  // WEIR_KERNELS_CUDA_DECODE_ATTENTION_INDEX_H_
