#include <cuda_runtime.h>

#include <string>

#include "kernels/cuda/attention/topk.cuh"
#include "kernels/cuda/attention/topk.h"
#include "kernels/cuda/launch_status.h"

namespace weir::kernels::cuda {
static_assert(int64_t{kTopkThreads} * kTopkRegItems == kTopkRegMaxWidth);

bool SupportsTopkPositions(const TopkParams& p) {
  if (p.rows < 0 || p.rows > 0x7fffffff || p.width < 0 || p.width > 0x7fffffff || p.k < 0) {
    return false;
  }
  if (p.rows == 0) return true;
  return p.visible_len != nullptr && (p.width == 0 || p.scores != nullptr) &&
         (p.k == 0 || p.out != nullptr);
}

absl::Status TopkPositions(const TopkParams& p, cudaStream_t stream) {
  if (!SupportsTopkPositions(p)) {
    return absl::InvalidArgumentError(
        "TopkPositions: needs 0 <= rows < 2^31, 0 <= width < 2^31, k >= 0 and the pointers; got "
        "rows " + std::to_string(p.rows) + " width " + std::to_string(p.width) + " k " +
        std::to_string(p.k));
  }
  if (p.rows == 0) return absl::OkStatus();
  // Masked rows select among their visible entries only, so the register
  // kernel takes any width and reads each row of up to kTopkRegMaxWidth
  // visible entries into registers (longer ones from memory, in the block).
  if (p.in_registers && (p.masked_past_visible || p.width <= kTopkRegMaxWidth)) {
    TopkPositionsRegKernel<kTopkThreads, kTopkRegItems>
        <<<static_cast<unsigned>(p.rows), kTopkThreads, 0, stream>>>(
            p.scores, p.visible_len, p.out, p.width, p.k, p.offset, p.masked_past_visible);
    return LaunchStatus("TopkPositions in registers");
  }
  TopkPositionsKernel<kTopkThreads><<<static_cast<unsigned>(p.rows), kTopkThreads, 0, stream>>>(
      p.scores, p.visible_len, p.out, p.width, p.k, p.offset, p.masked_past_visible);
  return LaunchStatus("TopkPositions");
}

bool SupportsCandidateBlocks(const CandidateBlocksParams& p) {
  if (p.rows < 0 || p.rows > 0x7fffffff || p.width < 0 || p.width > 0x7fffffff ||
      p.topk_blocks <= 0 || p.block_size <= 0) {
    return false;
  }
  if (p.rows == 0 || p.width == 0) return true;
  return p.scores != nullptr && p.visible_len != nullptr && p.pool != nullptr;
}

absl::Status CandidateBlocks(const CandidateBlocksParams& p, cudaStream_t stream) {
  if (!SupportsCandidateBlocks(p)) {
    return absl::InvalidArgumentError(
        "CandidateBlocks: needs 0 <= rows < 2^31, 0 <= width < 2^31, topk_blocks > 0, "
        "block_size > 0 and the pointers; got rows " + std::to_string(p.rows) + " width " +
        std::to_string(p.width) + " topk_blocks " + std::to_string(p.topk_blocks) +
        " block_size " + std::to_string(p.block_size));
  }
  if (p.rows == 0 || p.width == 0) return absl::OkStatus();
  CandidateBlocksKernel<kTopkThreads><<<static_cast<unsigned>(p.rows), kTopkThreads, 0, stream>>>(
      p.scores, p.visible_len, p.pool, p.width, p.topk_blocks, p.block_size, p.masked_past_visible);
  return LaunchStatus("CandidateBlocks");
}

}  // namespace weir::kernels::cuda
