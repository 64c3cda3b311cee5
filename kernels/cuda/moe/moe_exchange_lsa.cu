#include <cuda_runtime.h>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/launch_status.h"
#include "kernels/cuda/moe/moe_exchange_lsa.cuh"
#include "kernels/cuda/moe/moe_exchange_lsa.h"

namespace weir::kernels::cuda {

static_assert(kMoeLsaMaxPairs == moe::kLsaMaxPairs);

namespace {

bool TeamIsWorld(const ncclDevComm* comm) {
  return comm != nullptr && comm->nRanks >= 1 && comm->lsaSize == comm->nRanks && comm->rank >= 0 &&
         comm->rank < comm->nRanks;
}

}  // namespace

bool SupportsMoeDispatchLsa(const MoeDispatchLsaParams& p) {
  if (!TeamIsWorld(p.comm)) return false;
  const int64_t world = p.comm->nRanks;
  return p.tokens >= 1 && p.dim >= 1 && p.topk >= 1 && p.slots_per_rank >= 1 &&
         world * p.topk <= kMoeLsaMaxPairs && world * p.tokens * p.dim < (int64_t{1} << 60) &&
         world * p.tokens * p.topk < (int64_t{1} << 31) &&
         world * p.slots_per_rank < (int64_t{1} << 31) && p.slots != nullptr &&
         p.route_weight != nullptr && p.x != nullptr && p.recv_x != nullptr &&
         p.recv_slot != nullptr && p.recv_weight != nullptr && p.return_row != nullptr &&
         p.barrier != nullptr;
}

bool SupportsMoeReturnLsa(const MoeReturnLsaParams& p) {
  if (!TeamIsWorld(p.comm)) return false;
  const int64_t world = p.comm->nRanks;
  return p.tokens >= 1 && p.dim >= 1 && p.topk >= 1 &&
         world * p.tokens * p.topk < (int64_t{1} << 31) &&
         world * p.tokens * p.topk * p.dim < (int64_t{1} << 60) && p.y_grouped != nullptr &&
         p.pair_row != nullptr && p.ret != nullptr && p.barrier != nullptr;
}

absl::Status MoeDispatchLsa(const MoeDispatchLsaParams& p, cudaStream_t stream) {
  if (!SupportsMoeDispatchLsa(p)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "MoeDispatchLsa: unsupported (tokens ", p.tokens, ", dim ", p.dim, ", topk ", p.topk,
        ", slots per rank ", p.slots_per_rank,
        "; needs a device communicator whose ranks are all load/store accessible, world * topk "
        "<= ",
        kMoeLsaMaxPairs, " and non-null arrays and windows)"));
  }
  moe::DispatchLsaKernel<<<kMoeLsaCtas, moe::kLsaThreads, 0, stream>>>(
      p.slots, p.route_weight, p.x, p.valid_tokens, p.recv_x, p.recv_slot, p.recv_weight,
      p.return_row, p.barrier, p.abort, p.comm->nRanks, p.comm->rank, p.tokens, p.dim, p.topk,
      p.slots_per_rank);
  return LaunchStatus("MoeDispatchLsa");
}

absl::Status MoeReturnLsa(const MoeReturnLsaParams& p, cudaStream_t stream) {
  if (!SupportsMoeReturnLsa(p)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "MoeReturnLsa: unsupported (tokens ", p.tokens, ", dim ", p.dim, ", topk ", p.topk,
        "; needs a device communicator whose ranks are all load/store accessible and non-null "
        "arrays and window)"));
  }
  moe::ReturnLsaKernel<<<kMoeLsaCtas, moe::kLsaThreads, 0, stream>>>(
      p.y_grouped, p.pair_row, p.ret, p.barrier, p.abort, p.comm->nRanks, p.comm->rank, p.tokens,
      p.dim, p.topk);
  return LaunchStatus("MoeReturnLsa");
}

}  // namespace weir::kernels::cuda
