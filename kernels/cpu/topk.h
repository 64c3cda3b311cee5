// kernels/cpu/topk.h
//
// Index selection of DeepSeek-V4.1's sparse attention (spec §4.3.3-4.3.4):
//   * TopkPositions: per query row, the k best compressed positions by score,
//     re-sorted ascending by position, visible ones shifted by `offset`, the
//     rest -1 (the attention's "empty slot").
//   * CandidateBlocks: the hierarchical pool of the candidate source layer:
//     blocks of `block_size` positions scored by their max, the block holding
//     the row's newest visible position pinned (+inf), the top `topk_blocks`
//     blocks with a finite or pinned score kept.
// Ties and -inf: torch.topk leaves both unspecified; here equal scores go to
// the lower position (block), and a -inf (or NaN) score is never selected
// (its slot becomes -1). The reference can select a -inf position below compress_len
// only when fewer than k positions score above -inf inside the candidate
// pool; we return -1 there instead (see README "Ambiguities").
//
// Thread safety: pure functions over caller-owned memory.

#ifndef WEIR_KERNELS_CPU_TOPK_H_
#define WEIR_KERNELS_CPU_TOPK_H_

#include <cstdint>
#include <span>

#include "absl/status/status.h"

namespace weir::kernels::cpu {

struct TopkArgs {
  std::span<const float> scores;        // [rows, width]; -inf = not selectable
  std::span<const int64_t> visible_len; // [rows]: compress_len of each row (<= width)
  std::span<int32_t> out;               // [rows, k]: ascending positions + offset, then -1s
  int64_t rows = 0;
  int64_t width = 0;
  int k = 0;
  int32_t offset = 0;
};

// Fills args.out. Returns INVALID_ARGUMENT on bad sizes, k < 0, or a
// visible_len outside [0, width].
absl::Status TopkPositions(const TopkArgs& args);

struct CandidateBlocksArgs {
  std::span<const float> scores;         // [rows, width] index scores, invisible = -inf
  std::span<const int64_t> visible_len;  // [rows] compress_len per row
  std::span<uint8_t> pool;               // out [rows, width]: 1 = inside a kept block
  int64_t rows = 0;
  int64_t width = 0;
  int topk_blocks = 0;
  int block_size = 0;
};

// Fills args.pool. A row with visible_len 0 pins nothing. Returns
// INVALID_ARGUMENT on bad sizes or non-positive block_size / topk_blocks.
absl::Status CandidateBlocks(const CandidateBlocksArgs& args);

}  // namespace weir::kernels::cpu

#endif  // WEIR_KERNELS_CPU_TOPK_H_
