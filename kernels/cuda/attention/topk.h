// kernels/cuda/attention/topk.h
//
// Index selection of the sparse attention on the GPU: the CUDA backends of
// kernels/cpu/topk.h TopkPositions and CandidateBlocks, with the CPU's exact
// selection rule, so equal scores give identical outputs:
//   * candidates are the entries (positions, or blocks) scoring above -inf;
//     NaN and -inf are never selected;
//   * the min(k, n) best entries of the whole row are taken in the order
//     (score descending, index ascending), equal scores going to the lower
//     index and -0 equal to +0; -inf entries only fill the selection when
//     fewer candidates exist, and are then dropped, as on the CPU;
//   * TopkPositions keeps the selected positions below visible_len (the
//     invisible ones still take their places among the best), ascending, plus
//     `offset`, then -1; CandidateBlocks scores block b by the max of its
//     positions (NaN skipped), pins the block of the row's newest visible
//     position at +inf, and marks every position of each kept block with 1.
//
// Method: one thread block per row finds the selection threshold with a radix
// select over order-preserving 32-bit keys (4 passes of 8 bits), and, only
// when scores tie at the threshold, a second radix select over indices; a
// block-wide prefix sum then writes the kept positions in ascending order.
// Each pass rereads the row (about 6 reads in all); no workspace.
//
// Thread safety: stateless; safe from any thread.

#ifndef WEIR_KERNELS_CUDA_ATTENTION_TOPK_H_
#define WEIR_KERNELS_CUDA_ATTENTION_TOPK_H_

#include <cstdint>

#include "absl/status/status.h"

typedef struct CUstream_st* cudaStream_t;

namespace weir::kernels::cuda {

// The widest rows TopkParams::in_registers holds in registers (a decoder's
// width at contexts up to 8,192 x its compression ratio).
inline constexpr int64_t kTopkRegMaxWidth = 8192;

struct TopkParams {
  const float* scores = nullptr;         // device [rows, width]; -inf = not selectable
  const int64_t* visible_len = nullptr;  // device [rows]: compress_len of each row, in [0, width]
  int32_t* out = nullptr;                // device [rows, k]: ascending positions + offset, then -1s
  int64_t rows = 0;
  int64_t width = 0;
  int k = 0;
  int32_t offset = 0;
  // The caller's promise that every score at or past its row's visible_len
  // is -inf or NaN (IndexerScore's rows): such scores are never selectable,
  // so the select reads only [0, visible_len) and gives the same positions.
  // Its cost then follows the visible length, not the width (a decoder's
  // width is its longest context's entries).
  bool masked_past_visible = false;
  // Rows of up to 8,192 (kTopkRegMaxWidth) selectable entries (the width, or
  // with masked_past_visible the row's visible length, so a server's wide
  // decoder rows qualify at short contexts) select with the entries held in
  // registers (TopkPositionsRegKernel: read once, each tie and the output one
  // prefix sum each) instead of rereading the row every pass; longer rows as
  // before. The same positions (the selection is exact). Built in the
  // forty-third session, not yet run on a GPU.
  bool in_registers = false;
};

// Returns true if the launcher handles `params`: rows >= 0, 0 <= width <
// 2^31, k >= 0, rows < 2^31, and non-null scores / visible_len / out
// wherever rows > 0 (scores only when width > 0, out only when k > 0).
bool SupportsTopkPositions(const TopkParams& params);

// Enqueues the selection on `stream`; writes every element of out. A
// visible_len outside [0, width] is clamped into it (the CPU reference returns
// INVALID_ARGUMENT; the device cannot report it). Returns INVALID_ARGUMENT
// when SupportsTopkPositions is false; INTERNAL with the CUDA error if the
// launch fails. rows == 0 enqueues nothing.
absl::Status TopkPositions(const TopkParams& params, cudaStream_t stream);

struct CandidateBlocksParams {
  const float* scores = nullptr;         // device [rows, width] index scores, invisible = -inf
  const int64_t* visible_len = nullptr;  // device [rows] compress_len per row, in [0, width]
  uint8_t* pool = nullptr;               // device out [rows, width]: 1 = inside a kept block
  int64_t rows = 0;
  int64_t width = 0;
  int topk_blocks = 0;
  int block_size = 0;
  // As TopkParams::masked_past_visible: the blocks past the one holding a
  // row's last visible score are never selectable, so the select reads only
  // the blocks up to it (the same pool; the rest is still written 0).
  bool masked_past_visible = false;
};

// Returns true if the launcher handles `params`: rows >= 0, 0 <= width <
// 2^31, topk_blocks > 0, block_size > 0, rows < 2^31, and non-null pointers
// wherever rows * width > 0.
bool SupportsCandidateBlocks(const CandidateBlocksParams& params);

// Enqueues the pool selection on `stream`; writes every element of pool. A
// row with visible_len 0 pins nothing; visible_len is clamped into [0, width]
// as in TopkPositions. Returns INVALID_ARGUMENT when SupportsCandidateBlocks
// is false; INTERNAL with the CUDA error if the launch fails.
// rows * width == 0 enqueues nothing.
absl::Status CandidateBlocks(const CandidateBlocksParams& params, cudaStream_t stream);

}  // namespace weir::kernels::cuda

#endif  // WEIR_KERNELS_CUDA_ATTENTION_TOPK_H_
