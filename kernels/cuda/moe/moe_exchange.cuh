// kernels/cuda/moe/moe_exchange.cuh — device code of MoeDispatchPack. No host
// dependencies.
#ifndef WEIR_KERNELS_CUDA_MOE_MOE_EXCHANGE_CUH_
#define WEIR_KERNELS_CUDA_MOE_MOE_EXCHANGE_CUH_

#include <cstdint>

#include "kernels/cuda/grid_dependency.cuh"

namespace weir::kernels::cuda::moe {

inline constexpr int kDispatchThreads = 256;
inline constexpr int kDispatchMaxPairs = 1024;  // world * topk

// One block per token. Threads first resolve the (peer, k) pairs of the token,
// then copy x into the blocks of the peers that receive a pair.
__global__ void __launch_bounds__(kDispatchThreads)
    DispatchPackKernel(const int32_t* __restrict__ slots, const float* __restrict__ weight,
                       const float* __restrict__ x, const int64_t* __restrict__ valid_tokens,
                       float* __restrict__ send_x, int32_t* __restrict__ send_slot,
                       float* __restrict__ send_weight, int32_t* __restrict__ return_row,
                       int64_t tokens, int64_t dim, int topk, int world, int slots_per_rank) {
  GridDependencyPrologue();
  __shared__ int s_needed[kDispatchMaxPairs];  // per peer: 1 if some pair of t goes there
  const int64_t t = blockIdx.x;
  const bool valid = valid_tokens == nullptr || t < *valid_tokens;
  for (int p = threadIdx.x; p < world; p += blockDim.x) s_needed[p] = 0;
  __syncthreads();
  const int num_physical = world * slots_per_rank;
  for (int i = threadIdx.x; i < world * topk; i += blockDim.x) {
    const int p = i / topk, k = i % topk;
    const int s = valid ? slots[t * topk + k] : -1;
    const int dest = s >= 0 && s < num_physical ? s / slots_per_rank : -1;
    const int64_t at = (p * tokens + t) * topk + k;
    send_slot[at] = dest == p ? s % slots_per_rank : -1;
    send_weight[at] = dest == p ? weight[t * topk + k] : 0.0f;
    if (dest == p) s_needed[p] = 1;
    if (p == 0) {
      return_row[t * topk + k] =
          dest >= 0 ? static_cast<int32_t>((dest * tokens + t) * topk + k) : -1;
    }
  }
  __syncthreads();
  for (int p = 0; p < world; ++p) {
    if (!s_needed[p]) continue;
    float* out = send_x + (p * tokens + t) * dim;
    const float* in = x + t * dim;
    for (int64_t c = threadIdx.x; c < dim; c += blockDim.x) out[c] = in[c];
  }
}

inline constexpr int kLoadThreads = 256;

// One block: the pairs of the valid tokens, counted per expert with integer
// atomics; thread 0 adds the served total once every count is in.
__global__ void __launch_bounds__(kLoadThreads)
    AccumulateLoadKernel(const int32_t* __restrict__ experts,
                         const int64_t* __restrict__ valid_tokens,
                         const int64_t* __restrict__ group_offsets,
                         unsigned long long* __restrict__ routed,
                         unsigned long long* __restrict__ served, int64_t tokens, int topk,
                         int num_experts, int num_groups) {
  GridDependencyPrologue();
  __shared__ unsigned long long s_counted;
  if (threadIdx.x == 0) s_counted = 0;
  __syncthreads();
  int64_t valid = valid_tokens == nullptr ? tokens : *valid_tokens;
  valid = valid < 0 ? 0 : (valid > tokens ? tokens : valid);
  unsigned long long mine = 0;
  for (int64_t i = threadIdx.x; i < valid * topk; i += blockDim.x) {
    const int e = experts[i];
    if (e < 0 || e >= num_experts) continue;
    atomicAdd(&routed[e], 1ull);
    ++mine;
  }
  atomicAdd(&s_counted, mine);
  __syncthreads();
  if (threadIdx.x == 0 && served != nullptr) {
    *served += group_offsets != nullptr
                   ? static_cast<unsigned long long>(group_offsets[num_groups])
                   : s_counted;
  }
}

}  // namespace weir::kernels::cuda::moe

#endif  // WEIR_KERNELS_CUDA_MOE_MOE_EXCHANGE_CUH_
