#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/launch_status.h"
#include "kernels/cuda/moe/moe_permute.cuh"
#include "kernels/cuda/moe/moe_permute.h"

namespace weir::kernels::cuda {

static_assert(kMoeGroupRowsMaxGroups == moe::kGroupThreads);

namespace {
bool Aligned16(const void* p) { return p != nullptr && reinterpret_cast<uintptr_t>(p) % 16 == 0; }
}  // namespace

bool SupportsMoeGroupRows(const MoeGroupRowsParams& p) {
  const bool rows = p.codes != nullptr
                        ? p.dim % 512 == 0 && Aligned16(p.codes) && Aligned16(p.scales) &&
                              Aligned16(p.codes_grouped) && Aligned16(p.scales_grouped) &&
                              (p.bf16_grouped == nullptr || Aligned16(p.bf16_grouped))
                        : p.x != nullptr && p.x_grouped != nullptr;
  if (p.codes == nullptr && p.bf16_grouped != nullptr) return false;
  return p.tokens > 0 && p.dim > 0 && p.dim <= 65535 * moe::kRowChunk && p.topk > 0 &&
         p.num_groups >= 1 && p.num_groups <= kMoeGroupRowsMaxGroups &&
         p.tokens * p.topk < (int64_t{1} << 31) && p.groups != nullptr &&
         p.group_offsets != nullptr && p.pair_row != nullptr && rows &&
         (p.route_weight == nullptr || p.weight_grouped != nullptr) &&
         (p.token_role == nullptr ||
          (p.role_stride >= 1 && int64_t{p.role_stride} * 2 == p.num_groups));
}

absl::Status MoeGroupRows(const MoeGroupRowsParams& p, cudaStream_t stream) {
  if (!SupportsMoeGroupRows(p)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "MoeGroupRows: unsupported (tokens ", p.tokens, ", dim ", p.dim, ", topk ", p.topk,
        ", groups ", p.num_groups, "; needs groups <= ", kMoeGroupRowsMaxGroups,
        ", non-null arrays, weight_grouped with route_weight, num_groups twice role_stride "
        "with token_role)"));
  }
  const int64_t pairs = p.tokens * p.topk;
  if (p.wide && pairs > moe::kGroupRowsWidePairs) {  // each warp numbering its own span
    const int64_t smem = int64_t{moe::kGroupThreads / 32} * p.num_groups * 4;
    if (absl::Status s = AllowSharedBytes(moe::GroupRowsWideKernel, smem, "MoeGroupRows");
        !s.ok()) {
      return s;
    }
    moe::GroupRowsWideKernel<<<1, moe::kGroupThreads, static_cast<size_t>(smem), stream>>>(
        p.groups, pairs, p.num_groups, p.valid_tokens, p.topk, p.group_offsets, p.pair_row,
        p.token_role, p.role_stride);
  } else {
    moe::GroupRowsKernel<<<1, moe::kGroupThreads, 0, stream>>>(
        p.groups, pairs, p.num_groups, p.valid_tokens, p.topk, p.group_offsets, p.pair_row,
        p.token_role, p.role_stride);
  }
  if (absl::Status s = LaunchStatus("MoeGroupRows"); !s.ok()) return s;
  if (p.codes != nullptr) {  // the FP8 form: a block of 16-byte chunks per pair
    moe::GatherCodesKernel<<<static_cast<unsigned>(pairs), moe::kGatherCodesThreads, 0, stream>>>(
        p.codes, p.scales, p.route_weight, p.pair_row, p.codes_grouped, p.scales_grouped,
        p.weight_grouped, p.bf16_grouped, p.dim, p.topk);
    return LaunchStatus("MoeGroupRows gather codes");
  }
  const unsigned chunks = static_cast<unsigned>((p.dim + moe::kRowChunk - 1) / moe::kRowChunk);
  moe::GatherRowsKernel<<<dim3(static_cast<unsigned>(pairs), chunks), 256, 0, stream>>>(
      p.x, p.route_weight, p.pair_row, p.x_grouped, p.weight_grouped, p.dim, p.topk);
  return LaunchStatus("MoeGroupRows gather");
}

bool SupportsMoeCombine(const MoeCombineParams& p) {
  return p.tokens > 0 && p.tokens < (int64_t{1} << 31) && p.dim > 0 &&
         p.dim <= 65535 * moe::kRowChunk && p.topk >= 1 && p.topk <= moe::kCombineMaxTopk &&
         (p.y_grouped != nullptr) != (p.y_grouped_bf16 != nullptr) && p.pair_row != nullptr &&
         p.experts != nullptr && p.out != nullptr;
}

absl::Status MoeCombine(const MoeCombineParams& p, cudaStream_t stream) {
  if (!SupportsMoeCombine(p)) {
    return absl::InvalidArgumentError(absl::StrCat("MoeCombine: unsupported (tokens ", p.tokens,
                                                   ", dim ", p.dim, ", topk ", p.topk,
                                                   "; needs topk <= ", moe::kCombineMaxTopk,
                                                   ", non-null arrays)"));
  }
  // Decode's few tokens: a thread per column of a block's 1,024 (one pass: a
  // decode step's combine is latency, not bandwidth). Prefill's many (at
  // least kCombineWholeRowTokens): a block a token, its threads walking the
  // row, so the token's ids are read and sorted once, not once a chunk (at
  // 4,096 tokens of dim 5,120 that was 20,480 blocks of one column a thread).
  const int64_t chunk = moe::CombineChunk(p.tokens, p.dim);
  const unsigned chunks = static_cast<unsigned>((p.dim + chunk - 1) / chunk);
  const dim3 grid(static_cast<unsigned>(p.tokens), chunks);
  // Prefill's whole rows: 16 bytes of columns a thread (the same sums), where
  // the row and the arrays allow it; the block only as wide as a row needs.
  const void* y = p.y_grouped_bf16 != nullptr ? static_cast<const void*>(p.y_grouped_bf16)
                                              : static_cast<const void*>(p.y_grouped);
  const int64_t per_load = p.y_grouped_bf16 != nullptr ? 8 : 4;
  if (p.vec16 && chunk >= p.dim && p.dim % per_load == 0 && Aligned16(y) && Aligned16(p.out) &&
      (p.shared == nullptr || Aligned16(p.shared))) {
    const int64_t lanes = (p.dim / per_load + 31) / 32 * 32;
    const unsigned threads = static_cast<unsigned>(
        std::min<int64_t>(moe::kRowChunk, std::max<int64_t>(lanes, (p.topk + 31) / 32 * 32)));
    if (p.y_grouped_bf16 != nullptr) {
      moe::CombineKernel<uint16_t, true>
          <<<grid, threads, 0, stream>>>(p.y_grouped_bf16, p.pair_row, p.experts, p.shared, p.out,
                                         p.dim, p.topk, p.round_bf16, chunk);
    } else {
      moe::CombineKernel<float, true><<<grid, threads, 0, stream>>>(
          p.y_grouped, p.pair_row, p.experts, p.shared, p.out, p.dim, p.topk, p.round_bf16, chunk);
    }
    return LaunchStatus("MoeCombine");
  }
  if (p.y_grouped_bf16 != nullptr) {
    moe::CombineKernel<<<grid, static_cast<unsigned>(moe::kRowChunk), 0, stream>>>(
        p.y_grouped_bf16, p.pair_row, p.experts, p.shared, p.out, p.dim, p.topk, p.round_bf16,
        chunk);
  } else {
    moe::CombineKernel<<<grid, static_cast<unsigned>(moe::kRowChunk), 0, stream>>>(
        p.y_grouped, p.pair_row, p.experts, p.shared, p.out, p.dim, p.topk, p.round_bf16, chunk);
  }
  return LaunchStatus("MoeCombine");
}

}  // namespace weir::kernels::cuda
