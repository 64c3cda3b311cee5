// kernels/cuda/dense/sampling.cuh — device code of ArgmaxRows, TopKRows and
// RowLogSumExp. No host dependencies. One thread block per row.
#ifndef WEIR_KERNELS_CUDA_DENSE_SAMPLING_CUH_
#define WEIR_KERNELS_CUDA_DENSE_SAMPLING_CUH_

#include <cstdint>

#include "kernels/cuda/grid_dependency.cuh"

namespace weir::kernels::cuda::dense {

// A 64-bit key whose unsigned order is the CPU's candidate order: value
// descending, then id ascending. High word: the value's bits mapped so that
// unsigned order is numeric order, with -0 folded onto +0 (they compare
// equal on the CPU) and NaN mapped to 0 (below -Inf). Low word: ~id.
__device__ __forceinline__ uint64_t CandidateKey(float v, uint32_t id) {
  uint32_t ordered;
  if (isnan(v)) {
    ordered = 0u;
  } else if (v == 0.0f) {
    ordered = 0x80000000u;
  } else {
    const uint32_t bits = __float_as_uint(v);
    ordered = (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
  }
  return (static_cast<uint64_t>(ordered) << 32) | static_cast<uint64_t>(~id);
}

__device__ __forceinline__ uint32_t KeyId(uint64_t key) {
  return ~static_cast<uint32_t>(key & 0xFFFFFFFFu);
}

// Block-wide reductions for blocks of kThreads (a multiple of 32, <= 1024);
// every thread gets the result. `scratch` holds kThreads / 32 entries.
template <int kThreads>
__device__ uint64_t BlockMax(uint64_t v, uint64_t* scratch) {
  for (int offset = 16; offset > 0; offset /= 2) {
    const uint64_t o = __shfl_xor_sync(0xffffffffu, v, offset);
    v = o > v ? o : v;
  }
  if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = v;
  __syncthreads();
  v = scratch[0];
  for (int i = 1; i < kThreads / 32; ++i) v = scratch[i] > v ? scratch[i] : v;
  __syncthreads();  // scratch may be reused right away
  return v;
}

// Sum in a fixed tree (so the result is deterministic for a given vocab).
template <int kThreads>
__device__ double BlockSum(double v, double* scratch) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = v;
  __syncthreads();
  v = 0.0;
  for (int i = 0; i < kThreads / 32; ++i) v += scratch[i];
  __syncthreads();
  return v;
}

template <int kThreads>
__global__ void __launch_bounds__(kThreads)
    ArgmaxKernel(const float* __restrict__ logits, int64_t vocab, int32_t* __restrict__ ids,
                 float* __restrict__ values) {
  GridDependencyPrologue();
  __shared__ uint64_t scratch[kThreads / 32];
  const float* row = logits + static_cast<int64_t>(blockIdx.x) * vocab;
  uint64_t best = 0;
  uint32_t bad = 0;  // NaN or +Inf seen
  for (int64_t i = threadIdx.x; i < vocab; i += kThreads) {
    const float v = row[i];
    bad |= (isnan(v) || v == INFINITY) ? 1u : 0u;
    const uint64_t key = CandidateKey(v, static_cast<uint32_t>(i));
    best = key > best ? key : best;
  }
  best = BlockMax<kThreads>(best, scratch);
  bad = __syncthreads_or(bad);
  if (threadIdx.x != 0) return;
  const uint32_t id = KeyId(best);
  const float v = row[id];
  if (bad) {
    ids[blockIdx.x] = -1;
  } else if (v == -INFINITY) {
    ids[blockIdx.x] = -2;
  } else {
    ids[blockIdx.x] = static_cast<int32_t>(id);
    if (values != nullptr) values[blockIdx.x] = v;
  }
}

// Top-k by radix select on the 64-bit keys (8-bit digits from the top, at
// most 8 passes, stopping once the bucket holding the k-th key is taken
// whole), then a bitonic sort of the k selected keys in shared memory.
template <int kThreads, int kMaxK>
__global__ void __launch_bounds__(kThreads)
    TopKKernel(const float* __restrict__ logits, int64_t vocab, int k,
               float* __restrict__ values, int32_t* __restrict__ ids) {
  GridDependencyPrologue();
  __shared__ uint32_t hist[256];
  __shared__ uint64_t selected[kMaxK];
  __shared__ uint64_t prefix, mask;
  __shared__ uint32_t remaining, done, count;
  const float* row = logits + static_cast<int64_t>(blockIdx.x) * vocab;
  if (threadIdx.x == 0) {
    prefix = 0;
    mask = 0;
    remaining = static_cast<uint32_t>(k);
    done = k == vocab ? 1u : 0u;  // every key is taken: threshold 0
    count = 0;
  }
  __syncthreads();
  for (int shift = 56; shift >= 0 && !done; shift -= 8) {
    for (int i = threadIdx.x; i < 256; i += kThreads) hist[i] = 0;
    __syncthreads();
    const uint64_t p = prefix, m = mask;
    for (int64_t i = threadIdx.x; i < vocab; i += kThreads) {
      const uint64_t key = CandidateKey(row[i], static_cast<uint32_t>(i));
      if ((key & m) == p) atomicAdd(&hist[(key >> shift) & 0xFFu], 1u);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      uint32_t above = 0;
      int d = 255;
      while (above + hist[d] < remaining) above += hist[d--];
      remaining -= above;
      prefix |= static_cast<uint64_t>(d) << shift;
      mask |= uint64_t{0xFF} << shift;
      if (hist[d] == remaining) done = 1u;
    }
    __syncthreads();
  }
  // Exactly k keys are >= prefix (the lower, undecided bits of prefix are 0).
  const uint64_t threshold = prefix;
  for (int64_t i = threadIdx.x; i < vocab; i += kThreads) {
    const uint64_t key = CandidateKey(row[i], static_cast<uint32_t>(i));
    if (key >= threshold) selected[atomicAdd(&count, 1u)] = key;
  }
  __syncthreads();
  int size = 1;
  while (size < k) size *= 2;
  for (int i = k + threadIdx.x; i < size; i += kThreads) selected[i] = 0;  // below every key
  __syncthreads();
  // Bitonic sort, descending.
  for (int len = 2; len <= size; len *= 2) {
    for (int stride = len / 2; stride > 0; stride /= 2) {
      for (int i = threadIdx.x; i < size; i += kThreads) {
        const int j = i ^ stride;
        if (j > i) {
          const bool descending = (i & len) == 0;
          const uint64_t a = selected[i], b = selected[j];
          if ((a < b) == descending) {
            selected[i] = b;
            selected[j] = a;
          }
        }
      }
      __syncthreads();
    }
  }
  const int64_t base = static_cast<int64_t>(blockIdx.x) * k;
  for (int i = threadIdx.x; i < k; i += kThreads) {
    const uint32_t id = KeyId(selected[i]);
    ids[base + i] = static_cast<int32_t>(id);
    values[base + i] = row[id];
  }
}

template <int kThreads>
__global__ void __launch_bounds__(kThreads)
    LogSumExpKernel(const float* __restrict__ logits, const float* __restrict__ temperature,
                    int64_t vocab, float* __restrict__ max_out, double* __restrict__ sum_out) {
  GridDependencyPrologue();
  __shared__ uint64_t key_scratch[kThreads / 32];
  __shared__ double sum_scratch[kThreads / 32];
  const float* row = logits + static_cast<int64_t>(blockIdx.x) * vocab;
  float t = temperature != nullptr ? temperature[blockIdx.x] : 1.0f;
  if (!(t > 0.0f)) t = 1.0f;
  uint64_t best = 0;
  for (int64_t i = threadIdx.x; i < vocab; i += kThreads) {
    const uint64_t key = CandidateKey(__fdiv_rn(row[i], t), static_cast<uint32_t>(i));
    best = key > best ? key : best;
  }
  best = BlockMax<kThreads>(best, key_scratch);
  const float m = __fdiv_rn(row[KeyId(best)], t);
  double sum = 0.0;
  for (int64_t i = threadIdx.x; i < vocab; i += kThreads) {
    sum += exp(static_cast<double>(__fdiv_rn(row[i], t)) - static_cast<double>(m));
  }
  sum = BlockSum<kThreads>(sum, sum_scratch);
  if (threadIdx.x == 0) {
    max_out[blockIdx.x] = m;
    sum_out[blockIdx.x] = sum;
  }
}

}  // namespace weir::kernels::cuda::dense

#endif  // WEIR_KERNELS_CUDA_DENSE_SAMPLING_CUH_
