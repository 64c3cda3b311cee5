// kernels/cuda/moe/moe_permute.cuh — device code of MoeGroupRows and
// MoeCombine. No host dependencies.
#ifndef WEIR_KERNELS_CUDA_MOE_MOE_PERMUTE_CUH_
#define WEIR_KERNELS_CUDA_MOE_MOE_PERMUTE_CUH_

#include <cstdint>

#include "kernels/cuda/grid_dependency.cuh"
#include "kernels/cuda/moe/numerics.cuh"

namespace weir::kernels::cuda::moe {

inline constexpr int kGroupThreads = 1024;  // one thread per group
inline constexpr int kCombineMaxTopk = 64;

// One block of kGroupThreads. Thread g counts, then numbers, the pairs of
// group g, reading the pair list in chunks through shared memory (ascending
// pair order, so rows within a group ascend). With valid_tokens, the pairs of
// tokens at or past *valid_tokens (padding rows) belong to no group.
__global__ void __launch_bounds__(kGroupThreads)
    GroupRowsKernel(const int32_t* __restrict__ groups, int64_t pairs, int num_groups,
                    const int64_t* __restrict__ valid_tokens, int topk,
                    int64_t* __restrict__ offsets, int32_t* __restrict__ pair_row) {
  GridDependencyPrologue();
  const int64_t live =
      valid_tokens == nullptr ? pairs : min(max(*valid_tokens, int64_t{0}) * topk, pairs);
  __shared__ int32_t s_chunk[kGroupThreads];
  __shared__ int64_t s_start[kGroupThreads];
  const int g = threadIdx.x;
  for (int pass = 0; pass < 2; ++pass) {
    int64_t count = 0;
    if (pass == 1 && g < num_groups) count = s_start[g];
    for (int64_t base = 0; base < pairs; base += kGroupThreads) {
      __syncthreads();
      const int64_t mine = base + threadIdx.x;
      if (mine < pairs) {
        const int32_t group = mine < live ? groups[mine] : -1;
        s_chunk[threadIdx.x] = group;
        if (pass == 1 && (group < 0 || group >= num_groups)) pair_row[mine] = -1;
      }
      __syncthreads();
      const int n = pairs - base < kGroupThreads ? static_cast<int>(pairs - base) : kGroupThreads;
      if (g >= num_groups) continue;
      for (int i = 0; i < n; ++i) {
        if (s_chunk[i] != g) continue;
        if (pass == 1) pair_row[base + i] = static_cast<int32_t>(count);
        ++count;
      }
    }
    if (pass == 0) {
      __syncthreads();
      if (g < num_groups) s_start[g] = count;
      __syncthreads();
      if (threadIdx.x == 0) {  // exclusive scan of the counts
        int64_t total = 0;
        offsets[0] = 0;
        for (int e = 0; e < num_groups; ++e) {
          const int64_t c = s_start[e];
          s_start[e] = total;
          total += c;
          offsets[e + 1] = total;
        }
      }
      __syncthreads();
    }
  }
}

// Columns one block of the row kernels (gather, combine) covers: a token's
// row is spread over ceil(dim / kRowChunk) blocks (blockIdx.y), so a decode
// step of a few tokens still fills the GPU. Per element nothing changes.
constexpr int64_t kRowChunk = 1024;

// One block per (pair, column chunk): copies its columns of x[t] to the
// pair's grouped row.
__global__ void GatherRowsKernel(const float* __restrict__ x,
                                 const float* __restrict__ route_weight,
                                 const int32_t* __restrict__ pair_row,
                                 float* __restrict__ x_grouped, float* __restrict__ weight_grouped,
                                 int64_t dim, int topk) {
  GridDependencyPrologue();
  const int64_t pair = blockIdx.x;
  const int32_t row = pair_row[pair];
  if (row < 0) return;
  const float* src = x + (pair / topk) * dim;
  float* dst = x_grouped + static_cast<int64_t>(row) * dim;
  const int64_t end = min(dim, (static_cast<int64_t>(blockIdx.y) + 1) * kRowChunk);
  for (int64_t c = blockIdx.y * kRowChunk + threadIdx.x; c < end; c += blockDim.x) dst[c] = src[c];
  if (blockIdx.y == 0 && threadIdx.x == 0 && route_weight != nullptr) {
    weight_grouped[row] = route_weight[pair];
  }
}

// One block per (token, column chunk): thread 0 orders the token's rows by
// expert id (insertion sort, stable), then every thread sums its columns in
// that order (each block sorts the same few ids: the order is the token's).
__global__ void CombineKernel(const float* __restrict__ y_grouped,
                              const int32_t* __restrict__ pair_row,
                              const int32_t* __restrict__ experts,
                              const float* __restrict__ shared, float* __restrict__ out,
                              int64_t dim, int topk, bool round_bf16) {
  GridDependencyPrologue();
  __shared__ int32_t s_row[kCombineMaxTopk];
  __shared__ int32_t s_key[kCombineMaxTopk];
  __shared__ int s_n;
  __shared__ int32_t s_pair_row[kCombineMaxTopk];
  __shared__ int32_t s_expert[kCombineMaxTopk];
  const int64_t t = blockIdx.x;
  // The token's ids read by topk threads at once (a chain of dependent
  // global loads on one thread was most of a decode step's combine).
  if (threadIdx.x < topk) {
    s_pair_row[threadIdx.x] = pair_row[t * topk + threadIdx.x];
    s_expert[threadIdx.x] = experts[t * topk + threadIdx.x];
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int n = 0;
    for (int k = 0; k < topk; ++k) {
      const int32_t row = s_pair_row[k], key = s_expert[k];
      if (row < 0) continue;
      int j = n++;
      for (; j > 0 && s_key[j - 1] > key; --j) {
        s_key[j] = s_key[j - 1];
        s_row[j] = s_row[j - 1];
      }
      s_key[j] = key;
      s_row[j] = row;
    }
    s_n = n;
  }
  __syncthreads();
  const int n = s_n;
  const int64_t end = min(dim, (static_cast<int64_t>(blockIdx.y) + 1) * kRowChunk);
  for (int64_t c = blockIdx.y * kRowChunk + threadIdx.x; c < end; c += blockDim.x) {
    // Up to 8 rows' loads in flight before their additions (in order: the
    // same sum).
    float acc = 0.0f;
    for (int j0 = 0; j0 < n; j0 += 8) {
      float v[8];
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        v[j] = j0 + j < n ? y_grouped[static_cast<int64_t>(s_row[j0 + j]) * dim + c] : 0.0f;
      }
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        if (j0 + j < n) acc = __fadd_rn(acc, v[j]);
      }
    }
    if (shared != nullptr) acc = __fadd_rn(acc, shared[t * dim + c]);
    out[t * dim + c] = round_bf16 ? RoundToBf16(acc) : acc;
  }
}

}  // namespace weir::kernels::cuda::moe

#endif  // WEIR_KERNELS_CUDA_MOE_MOE_PERMUTE_CUH_
