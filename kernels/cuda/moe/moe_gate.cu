#include <cuda_runtime.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/moe/moe_gate.cuh"
#include "kernels/cuda/moe/moe_gate.h"
#include "kernels/cuda/launch_status.h"

namespace weir::kernels::cuda {

static_assert(kMoeGateMaxExperts == moe::kGateMaxExperts && kMoeGateMaxTopk == moe::kGateMaxTopk);

bool SupportsMoeGate(const MoeGateParams& p) {
  return p.tokens > 0 && p.tokens <= 0x7fffffff && p.dim > 0 && p.num_experts >= 1 &&
         p.num_experts <= kMoeGateMaxExperts && p.topk >= 1 && p.topk <= p.num_experts &&
         p.topk <= kMoeGateMaxTopk && p.gate_temp > 0.0f &&
         (p.logits != nullptr || (p.x != nullptr && p.weight != nullptr)) &&
         p.indices != nullptr && p.weights != nullptr;
}

absl::Status MoeGate(const MoeGateParams& p, cudaStream_t stream) {
  if (!SupportsMoeGate(p)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "MoeGate: unsupported (tokens ", p.tokens, ", dim ", p.dim, ", experts ", p.num_experts,
        ", topk ", p.topk, ", gate_temp ", p.gate_temp, "; needs experts <= ", kMoeGateMaxExperts,
        ", 1 <= topk <= min(experts, ", kMoeGateMaxTopk, "), gate_temp > 0, non-null arrays)"));
  }
  int score = moe::kScoreSqrtSoftplus;
  if (p.score == GateScore::kSigmoid) score = moe::kScoreSigmoid;
  if (p.score == GateScore::kSoftmax) score = moe::kScoreSoftmax;
  const moe::GateKernelArgs args{.x = p.x,
                                 .weight = p.weight,
                                 .logits = p.logits,
                                 .bias = p.bias,
                                 .bias_vl = p.bias_vl,
                                 .image_mask = p.image_mask,
                                 .indices = p.indices,
                                 .weights = p.weights,
                                 .dim = p.dim,
                                 .num_experts = p.num_experts,
                                 .topk = p.topk,
                                 .gate_temp = p.gate_temp,
                                 .route_scale = p.route_scale,
                                 .norm_topk_prob = p.norm_topk_prob,
                                 .score = score};
  if (p.wide_block && p.logits == nullptr) {  // a warp an expert up to 32 experts
    constexpr int kWide = 1024;
    moe::MoeGateKernel<kWide><<<static_cast<unsigned>(p.tokens), kWide, 0, stream>>>(args);
    return LaunchStatus("MoeGate");
  }
  constexpr int kThreads = 256;
  moe::MoeGateKernel<kThreads><<<static_cast<unsigned>(p.tokens), kThreads, 0, stream>>>(args);
  return LaunchStatus("MoeGate");
}

absl::Status MoeGateLogits(const MoeGateLogitsParams& p, cudaStream_t stream) {
  // Two warps (pairs) a block: a decode step's few tokens spread over more
  // SMs (batch 1: 192 blocks for V4.1's 384 experts instead of 48, each
  // warp's chain of loads the same). The bits are a warp's, whatever the
  // block.
  constexpr int kWarps = 2;
  const int64_t pairs = p.tokens * p.num_experts;
  if (p.tokens <= 0 || p.dim <= 0 || p.num_experts < 1 || p.num_experts > kMoeGateMaxExperts ||
      p.tokens > 0x7fffffff || (pairs + kWarps - 1) / kWarps > 0x7fffffff || p.x == nullptr ||
      p.weight == nullptr || p.logits == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "MoeGateLogits: unsupported (tokens ", p.tokens, ", dim ", p.dim, ", experts ",
        p.num_experts, "; needs positive sizes, experts <= ", kMoeGateMaxExperts,
        ", non-null arrays)"));
  }
  moe::MoeGateLogitsKernel<kWarps>
      <<<static_cast<unsigned>((pairs + kWarps - 1) / kWarps), kWarps * 32, 0, stream>>>(
          p.x, p.weight, p.logits, p.dim, p.num_experts, pairs);
  return LaunchStatus("MoeGateLogits");
}

absl::Status BuildReplicaTable(std::span<const int32_t> physical_to_logical, int num_logical,
                               ReplicaTable* table) {
  if (num_logical <= 0) return absl::InvalidArgumentError("BuildReplicaTable: no experts");
  std::vector<int32_t> count(num_logical + 1, 0);
  for (int32_t e : physical_to_logical) {
    if (e < 0 || e >= num_logical) {
      return absl::InvalidArgumentError(
          absl::StrCat("BuildReplicaTable: expert ", e, " of ", num_logical));
    }
    ++count[e + 1];
  }
  for (int e = 0; e < num_logical; ++e) {
    if (count[e + 1] == 0) {
      return absl::InvalidArgumentError(absl::StrCat("BuildReplicaTable: expert ", e,
                                                     " has no slot"));
    }
    count[e + 1] += count[e];
  }
  table->offsets = count;
  table->slots.assign(physical_to_logical.size(), 0);
  std::vector<int32_t> next(count.begin(), count.end() - 1);
  for (size_t p = 0; p < physical_to_logical.size(); ++p) {  // ascending slots per expert
    table->slots[next[physical_to_logical[p]]++] = static_cast<int32_t>(p);
  }
  return absl::OkStatus();
}

bool SupportsExpertSlots(const ExpertSlotsParams& p) {
  return p.tokens > 0 && p.topk > 0 && p.num_logical > 0 && p.rank >= 0 &&
         p.tokens * p.topk <= int64_t{0x7fffffff} * 256 && p.indices != nullptr &&
         p.replica_offsets != nullptr && p.replica_slots != nullptr && p.slots != nullptr;
}

absl::Status ExpertSlots(const ExpertSlotsParams& p, cudaStream_t stream) {
  if (!SupportsExpertSlots(p)) {
    return absl::InvalidArgumentError(absl::StrCat("ExpertSlots: unsupported (tokens ", p.tokens,
                                                   ", topk ", p.topk, ", experts ",
                                                   p.num_logical, ", rank ", p.rank, ")"));
  }
  const int64_t pairs = p.tokens * p.topk;
  constexpr int kThreads = 256;
  const unsigned blocks = static_cast<unsigned>((pairs + kThreads - 1) / kThreads);
  moe::ExpertSlotsKernel<<<blocks, kThreads, 0, stream>>>(p.indices, p.replica_offsets,
                                                          p.replica_slots, p.slots, p.bad_count,
                                                          pairs, p.topk, p.num_logical, p.rank);
  return LaunchStatus("ExpertSlots");
}

}  // namespace weir::kernels::cuda
