#include <cuda_runtime.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/moe/expert_ffn.cuh"
#include "kernels/cuda/moe/expert_ffn.h"

namespace weir::kernels::cuda {
namespace {

// Row tiles of the grid: enough for any split of `rows` into `groups` groups.
int64_t RowTiles(int64_t rows, int groups) {
  return (rows + moe::kFfnTileM - 1) / moe::kFfnTileM + groups;
}

absl::Status Launch(const moe::GroupedGemmArgs& args, bool swiglu, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((args.n + moe::kFfnTileN - 1) / moe::kFfnTileN),
                  static_cast<unsigned>(RowTiles(args.rows, args.num_groups)));
  if (swiglu) {
    moe::GroupedGemmKernel<true><<<grid, moe::kFfnThreads, 0, stream>>>(args);
  } else {
    moe::GroupedGemmKernel<false><<<grid, moe::kFfnThreads, 0, stream>>>(args);
  }
  if (cudaError_t err = cudaGetLastError(); err != cudaSuccess) {
    return absl::InternalError(absl::StrCat("GroupedExpertFfn ", swiglu ? "w1/w3" : "w2",
                                            " launch: ", cudaGetErrorString(err)));
  }
  return absl::OkStatus();
}

}  // namespace

bool SupportsGroupedExpertFfn(const GroupedExpertFfnParams& p) {
  return p.rows >= 0 && p.dim > 0 && p.inter > 0 && p.num_groups > 0 &&
         (!p.w13_fp8_activation || p.dim % 32 == 0) &&
         (!p.w2_fp8_activation || p.inter % 32 == 0) &&
         RowTiles(p.rows, p.num_groups) < 65535 && (p.dim + 63) / 64 < 0x7fffffff &&
         (p.inter + 63) / 64 < 0x7fffffff && p.x != nullptr && p.group_offsets != nullptr &&
         p.w1 != nullptr && p.w3 != nullptr && p.w2 != nullptr && p.hidden != nullptr &&
         p.y != nullptr;
}

absl::Status GroupedExpertFfn(const GroupedExpertFfnParams& p, cudaStream_t stream) {
  if (!SupportsGroupedExpertFfn(p)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "GroupedExpertFfn: unsupported (rows ", p.rows, ", dim ", p.dim, ", inter ", p.inter,
        ", groups ", p.num_groups, "; FP8 activations need dim / inter multiples of 32, "
        "non-null arrays)"));
  }
  if (p.rows == 0) return absl::OkStatus();
  const moe::GroupedGemmArgs gate_up{.a = p.x,
                                     .offsets = p.group_offsets,
                                     .b1 = p.w1,
                                     .b3 = p.w3,
                                     .route_weight = p.route_weight,
                                     .out = p.hidden,
                                     .rows = p.rows,
                                     .n = p.inter,
                                     .k = p.dim,
                                     .num_groups = p.num_groups,
                                     .fp8_activation = p.w13_fp8_activation,
                                     .round_bf16 = p.round_bf16,
                                     .swiglu_limit = p.swiglu_limit};
  if (absl::Status s = Launch(gate_up, /*swiglu=*/true, stream); !s.ok()) return s;
  const moe::GroupedGemmArgs down{.a = p.hidden,
                                  .offsets = p.group_offsets,
                                  .b1 = p.w2,
                                  .b3 = nullptr,
                                  .route_weight = nullptr,
                                  .out = p.y,
                                  .rows = p.rows,
                                  .n = p.dim,
                                  .k = p.inter,
                                  .num_groups = p.num_groups,
                                  .fp8_activation = p.w2_fp8_activation,
                                  .round_bf16 = p.round_bf16,
                                  .swiglu_limit = 0.0f};
  return Launch(down, /*swiglu=*/false, stream);
}

}  // namespace weir::kernels::cuda
