#include <cuda_runtime.h>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/launch_status.h"
#include "kernels/cuda/moe/moe_exchange.cuh"
#include "kernels/cuda/moe/moe_exchange.h"

namespace weir::kernels::cuda {

static_assert(kMoeDispatchMaxPairs == moe::kDispatchMaxPairs);

bool SupportsMoeDispatchPack(const MoeDispatchPackParams& p) {
  return p.tokens >= 1 && p.dim >= 1 && p.topk >= 1 && p.world >= 1 && p.slots_per_rank >= 1 &&
         int64_t{p.world} * p.topk <= kMoeDispatchMaxPairs &&
         int64_t{p.world} * p.tokens * p.topk < (int64_t{1} << 31) &&
         int64_t{p.world} * p.slots_per_rank < (int64_t{1} << 31) && p.slots != nullptr &&
         p.route_weight != nullptr && p.x != nullptr && p.send_x != nullptr &&
         p.send_slot != nullptr && p.send_weight != nullptr && p.return_row != nullptr;
}

absl::Status MoeDispatchPack(const MoeDispatchPackParams& p, cudaStream_t stream) {
  if (!SupportsMoeDispatchPack(p)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "MoeDispatchPack: unsupported (tokens ", p.tokens, ", dim ", p.dim, ", topk ", p.topk,
        ", world ", p.world, ", slots per rank ", p.slots_per_rank,
        "; needs world * topk <= ", kMoeDispatchMaxPairs, " and non-null arrays)"));
  }
  moe::DispatchPackKernel<<<static_cast<unsigned>(p.tokens), moe::kDispatchThreads, 0, stream>>>(
      p.slots, p.route_weight, p.x, p.valid_tokens, p.send_x, p.send_slot, p.send_weight,
      p.return_row, p.tokens, p.dim, p.topk, p.world, p.slots_per_rank);
  return LaunchStatus("MoeDispatchPack");
}

bool SupportsAccumulateExpertLoad(const AccumulateExpertLoadParams& p) {
  return p.tokens >= 1 && p.topk >= 1 && p.num_experts >= 1 &&
         p.tokens * p.topk < (int64_t{1} << 31) && p.experts != nullptr && p.routed != nullptr &&
         (p.group_offsets == nullptr || p.num_groups >= 1);
}

absl::Status AccumulateExpertLoad(const AccumulateExpertLoadParams& p, cudaStream_t stream) {
  if (!SupportsAccumulateExpertLoad(p)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "AccumulateExpertLoad: unsupported (tokens ", p.tokens, ", topk ", p.topk, ", experts ",
        p.num_experts, ", groups ", p.num_groups, "; needs non-null experts and routed)"));
  }
  static_assert(sizeof(unsigned long long) == sizeof(int64_t));
  moe::AccumulateLoadKernel<<<1, moe::kLoadThreads, 0, stream>>>(
      p.experts, p.valid_tokens, p.group_offsets,
      reinterpret_cast<unsigned long long*>(p.routed),
      reinterpret_cast<unsigned long long*>(p.served), p.tokens, p.topk, p.num_experts,
      p.num_groups);
  return LaunchStatus("AccumulateExpertLoad");
}

}  // namespace weir::kernels::cuda
