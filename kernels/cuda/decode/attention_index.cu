#include <cuda_runtime.h>

#include <string>

#include "kernels/cuda/decode/attention_index.cuh"
#include "kernels/cuda/decode/attention_index.h"
#include "kernels/cuda/decode/launch_util.h"
#include "kernels/cuda/launch_status.h"

namespace weir::kernels::cuda::decode {

bool SupportsAssembleIndex(const AssembleIndexParams& p) {
  int64_t n = 0;
  if (p.rows < 0 || p.window_width < 0 || p.k_width < 0) return false;
  if (!internal::CheckedProduct({p.rows, int64_t{p.window_width} + p.k_width}, &n)) return false;
  if (n == 0) return true;
  if (p.out == nullptr || (p.window_width > 0 && p.window == nullptr)) return false;
  if (p.k_width == 0) return true;
  if (p.block_table != nullptr) {
    return p.topk != nullptr && p.table_slot != nullptr && p.table_width > 0 &&
           p.entries_per_block > 0;
  }
  return p.topk != nullptr && p.topk_row_base != nullptr;
}

absl::Status AssembleIndex(const AssembleIndexParams& p, cudaStream_t stream) {
  if (!SupportsAssembleIndex(p)) {
    return absl::InvalidArgumentError(
        "AssembleIndex: needs rows, window_width, k_width >= 0, out, window when window_width "
        "> 0, topk and topk_row_base (or block_table, table_slot, table_width > 0, "
        "entries_per_block > 0) when k_width > 0; got rows " +
        std::to_string(p.rows) + " window_width " + std::to_string(p.window_width) + " k_width " +
        std::to_string(p.k_width));
  }
  const int64_t n = p.rows * (int64_t{p.window_width} + p.k_width);
  if (n == 0) return absl::OkStatus();
  AssembleIndexKernel<<<internal::BlocksFor(n), internal::kThreads, 0, stream>>>(
      p.window, p.topk, p.topk_row_base, p.block_table, p.table_slot, p.table_width,
      p.entries_per_block, p.out, p.rows, p.window_width, p.k_width, p.window_base, p.topk_base);
  return LaunchStatus("AssembleIndex");
}

bool SupportsMaskScores(const MaskScoresParams& p) {
  return p.n == 0 || (p.n > 0 && p.scores != nullptr && p.keep != nullptr);
}

absl::Status MaskScores(const MaskScoresParams& p, cudaStream_t stream) {
  if (!SupportsMaskScores(p)) {
    return absl::InvalidArgumentError(
        "MaskScores: needs n >= 0, scores and keep when n > 0; got n " + std::to_string(p.n));
  }
  if (p.n == 0) return absl::OkStatus();
  MaskScoresKernel<<<internal::BlocksFor(p.n), internal::kThreads, 0, stream>>>(p.scores, p.keep,
                                                                                p.n);
  return LaunchStatus("MaskScores");
}

}  // namespace weir::kernels::cuda::decode
