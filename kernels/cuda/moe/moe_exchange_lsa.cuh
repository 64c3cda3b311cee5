// kernels/cuda/moe/moe_exchange_lsa.cuh — device code of MoeDispatchLsa and
// MoeReturnLsa (moe_exchange_lsa.h). Needs NCCL's device headers.
#ifndef WEIR_KERNELS_CUDA_MOE_MOE_EXCHANGE_LSA_CUH_
#define WEIR_KERNELS_CUDA_MOE_MOE_EXCHANGE_LSA_CUH_

#include <nccl_device.h>

#include <cstdint>

#include "kernels/cuda/grid_dependency.cuh"

namespace weir::kernels::cuda::moe {

inline constexpr int kLsaThreads = 256;
inline constexpr int kLsaMaxPairs = 1024;  // world * topk

// Copies `dim` floats from `in` to `out` (a peer's memory) with the CTA's or
// a warp's threads: `lane` of `lanes`. 16-byte stores when both are aligned.
__device__ __forceinline__ void CopyRow(float* out, const float* __restrict__ in, int64_t dim,
                                        int lane, int lanes) {
  if (dim % 4 == 0 && (reinterpret_cast<uintptr_t>(out) & 15) == 0 &&
      (reinterpret_cast<uintptr_t>(in) & 15) == 0) {
    float4* o = reinterpret_cast<float4*>(out);
    const float4* i = reinterpret_cast<const float4*>(in);
    for (int64_t c = lane; c < dim / 4; c += lanes) o[c] = i[c];
  } else {
    for (int64_t c = lane; c < dim; c += lanes) out[c] = in[c];
  }
}

// Every rank's CTA b meets CTA b of every other rank. The window `barrier`
// holds, on each rank, inbox[b][p] (the epoch peer p's CTA b last reached)
// for b < gridDim.x, then epoch[b] (this rank's). Each CTA's stores into the
// peers are ordered before its epoch (bar.sync, then a system-scope release
// store into every peer's inbox) and the peers' before it leaves (acquire
// loads of its own inbox). The wait gives up once *abort is non-zero (host
// memory the decoder raises when a peer is lost), so a dead peer never holds
// the device; the results are garbage then, which the host knows.
__device__ __forceinline__ void BoundedLsaBarrier(ncclWindow_t barrier, int world, int rank,
                                                  const volatile int32_t* abort) {
  __shared__ uint32_t s_epoch;
  uint32_t* local = static_cast<uint32_t*>(ncclGetLocalPointer(barrier, 0));
  uint32_t* epochs = local + static_cast<size_t>(gridDim.x) * world;
  __threadfence_system();  // this thread's stores into the peers, at system scope
  __syncthreads();         // ... and every thread's, before the epoch goes out
  if (threadIdx.x == 0) s_epoch = epochs[blockIdx.x] + 1;
  __syncthreads();
  const uint32_t epoch = s_epoch;
  for (int p = threadIdx.x; p < world; p += blockDim.x) {
    const size_t at = (static_cast<size_t>(blockIdx.x) * world + rank) * sizeof(uint32_t);
    ::cuda::atomic_ref<uint32_t, ::cuda::thread_scope_system> inbox(
        *static_cast<uint32_t*>(ncclGetLsaPointer(barrier, at, p)));
    inbox.store(epoch, ::cuda::memory_order_release);
  }
  for (int p = threadIdx.x; p < world; p += blockDim.x) {
    ::cuda::atomic_ref<uint32_t, ::cuda::thread_scope_system> inbox(
        local[static_cast<size_t>(blockIdx.x) * world + p]);
    for (uint32_t spins = 0;
         static_cast<int32_t>(inbox.load(::cuda::memory_order_acquire) - epoch) < 0; ++spins) {
      if (abort != nullptr && (spins & 1023) == 1023 && *abort != 0) break;
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) epochs[blockIdx.x] = epoch;
}

// Tokens grid-strided over the CTAs; per token the threads first resolve its
// (peer, k) pairs (slot and weight into each peer's block, return_row
// locally), then copy x[t] to the peers that serve one of its pairs.
__global__ void __launch_bounds__(kLsaThreads)
    DispatchLsaKernel(const int32_t* __restrict__ slots, const float* __restrict__ weight,
                      const float* __restrict__ x, const int64_t* __restrict__ valid_tokens,
                      ncclWindow_t recv_x, ncclWindow_t recv_slot, ncclWindow_t recv_weight,
                      int32_t* __restrict__ return_row, ncclWindow_t barrier,
                      const volatile int32_t* abort, int world, int rank, int64_t tokens,
                      int64_t dim, int topk, int slots_per_rank) {
  GridDependencyPrologue();
  __shared__ int s_needed[kLsaMaxPairs];
  const int num_physical = world * slots_per_rank;
  const int64_t valid = valid_tokens == nullptr ? tokens : *valid_tokens;
  for (int64_t t = blockIdx.x; t < tokens; t += gridDim.x) {
    for (int p = threadIdx.x; p < world; p += blockDim.x) s_needed[p] = 0;
    __syncthreads();
    for (int i = threadIdx.x; i < world * topk; i += blockDim.x) {
      const int p = i / topk, k = i % topk;
      const int s = t < valid ? slots[t * topk + k] : -1;
      const int dest = s >= 0 && s < num_physical ? s / slots_per_rank : -1;
      const size_t at = static_cast<size_t>((rank * tokens + t) * topk + k);
      *static_cast<int32_t*>(ncclGetLsaPointer(recv_slot, at * 4, p)) =
          dest == p ? s % slots_per_rank : -1;
      *static_cast<float*>(ncclGetLsaPointer(recv_weight, at * 4, p)) =
          dest == p ? weight[t * topk + k] : 0.0f;
      if (dest == p) s_needed[p] = 1;
      if (p == 0) return_row[t * topk + k] = dest >= 0 ? static_cast<int32_t>(t * topk + k) : -1;
    }
    __syncthreads();
    for (int p = 0; p < world; ++p) {
      if (!s_needed[p]) continue;
      const size_t row = static_cast<size_t>(rank * tokens + t);
      float* out = static_cast<float*>(ncclGetLsaPointer(recv_x, row * dim * 4, p));
      CopyRow(out, x + t * dim, dim, threadIdx.x, blockDim.x);
    }
    __syncthreads();  // s_needed is rewritten for the next token
  }
  BoundedLsaBarrier(barrier, world, rank, abort);
}

// A warp per received pair, grid-strided: a pair served here sends its
// grouped output row back to its source, at the pair's own row there.
__global__ void __launch_bounds__(kLsaThreads)
    ReturnLsaKernel(const float* __restrict__ y_grouped, const int32_t* __restrict__ pair_row,
                    ncclWindow_t ret, ncclWindow_t barrier, const volatile int32_t* abort,
                    int world, int rank, int64_t tokens, int64_t dim, int topk) {
  GridDependencyPrologue();
  const int64_t per_source = tokens * topk;
  const int64_t pairs = world * per_source;
  const int lane = threadIdx.x % 32;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x / 32);
  for (int64_t i = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32; i < pairs; i += warps) {
    const int32_t g = pair_row[i];
    if (g < 0) continue;
    const int src = static_cast<int>(i / per_source);
    const size_t row = static_cast<size_t>(i % per_source);
    float* out = static_cast<float*>(ncclGetLsaPointer(ret, row * dim * 4, src));
    CopyRow(out, y_grouped + static_cast<int64_t>(g) * dim, dim, lane, 32);
  }
  BoundedLsaBarrier(barrier, world, rank, abort);
}

}  // namespace weir::kernels::cuda::moe

#endif  // WEIR_KERNELS_CUDA_MOE_MOE_EXCHANGE_LSA_CUH_
