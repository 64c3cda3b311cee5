#include <cuda_runtime.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/moe/moe_permute.cuh"
#include "kernels/cuda/moe/moe_permute.h"
#include "kernels/cuda/launch_status.h"

namespace weir::kernels::cuda {

static_assert(kMoeGroupRowsMaxGroups == moe::kGroupThreads);

bool SupportsMoeGroupRows(const MoeGroupRowsParams& p) {
  return p.tokens > 0 && p.dim > 0 && p.dim <= 65535 * moe::kRowChunk && p.topk > 0 &&
         p.num_groups >= 1 && p.num_groups <= kMoeGroupRowsMaxGroups &&
         p.tokens * p.topk < (int64_t{1} << 31) && p.groups != nullptr && p.x != nullptr &&
         p.group_offsets != nullptr && p.pair_row != nullptr && p.x_grouped != nullptr &&
         (p.route_weight == nullptr || p.weight_grouped != nullptr);
}

absl::Status MoeGroupRows(const MoeGroupRowsParams& p, cudaStream_t stream) {
  if (!SupportsMoeGroupRows(p)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "MoeGroupRows: unsupported (tokens ", p.tokens, ", dim ", p.dim, ", topk ", p.topk,
        ", groups ", p.num_groups, "; needs groups <= ", kMoeGroupRowsMaxGroups,
        ", non-null arrays, weight_grouped with route_weight)"));
  }
  const int64_t pairs = p.tokens * p.topk;
  moe::GroupRowsKernel<<<1, moe::kGroupThreads, 0, stream>>>(
      p.groups, pairs, p.num_groups, p.valid_tokens, p.topk, p.group_offsets, p.pair_row);
  if (absl::Status s = LaunchStatus("MoeGroupRows"); !s.ok()) return s;
  const unsigned chunks = static_cast<unsigned>((p.dim + moe::kRowChunk - 1) / moe::kRowChunk);
  moe::GatherRowsKernel<<<dim3(static_cast<unsigned>(pairs), chunks), 256, 0, stream>>>(
      p.x, p.route_weight, p.pair_row, p.x_grouped, p.weight_grouped, p.dim, p.topk);
  return LaunchStatus("MoeGroupRows gather");
}

bool SupportsMoeCombine(const MoeCombineParams& p) {
  return p.tokens > 0 && p.tokens < (int64_t{1} << 31) && p.dim > 0 &&
         p.dim <= 65535 * moe::kRowChunk && p.topk >= 1 && p.topk <= moe::kCombineMaxTopk &&
         p.y_grouped != nullptr && p.pair_row != nullptr && p.experts != nullptr &&
         p.out != nullptr;
}

absl::Status MoeCombine(const MoeCombineParams& p, cudaStream_t stream) {
  if (!SupportsMoeCombine(p)) {
    return absl::InvalidArgumentError(absl::StrCat("MoeCombine: unsupported (tokens ", p.tokens,
                                                   ", dim ", p.dim, ", topk ", p.topk,
                                                   "; needs topk <= ", moe::kCombineMaxTopk,
                                                   ", non-null arrays)"));
  }
  const unsigned chunks = static_cast<unsigned>((p.dim + moe::kRowChunk - 1) / moe::kRowChunk);
  // A thread per column of a block's 1,024 (one pass: a decode step's
  // combine is latency, not bandwidth).
  moe::CombineKernel<<<dim3(static_cast<unsigned>(p.tokens), chunks),
                       static_cast<unsigned>(moe::kRowChunk), 0, stream>>>(
      p.y_grouped, p.pair_row, p.experts, p.shared, p.out, p.dim, p.topk, p.round_bf16);
  return LaunchStatus("MoeCombine");
}

}  // namespace weir::kernels::cuda
