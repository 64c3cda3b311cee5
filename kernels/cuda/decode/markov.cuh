// kernels/cuda/decode/markov.cuh — the MarkovDraft kernel (markov.h).

#ifndef WEIR_KERNELS_CUDA_DECODE_MARKOV_CUH_
#define WEIR_KERNELS_CUDA_DECODE_MARKOV_CUH_

#include <cstdint>

#include "kernels/common/dot_rows_order.h"
#include "kernels/cuda/decode/markov_argmax.cuh"
#include "kernels/cuda/grid_dependency.cuh"

namespace weir::kernels::cuda::decode {

// One CTA of kMarkovThreads: sequence blockIdx.x, its block's positions in
// turn; e in dynamic shared memory (rank floats). kLanes: DotRowsElement's
// (4 x kLanes >= rank, or 32).
template <int kLanes>
__global__ void __launch_bounds__(kMarkovThreads)
    MarkovDraftKernel(float* __restrict__ logits, const float* __restrict__ embed,
                      const float* __restrict__ head, float* __restrict__ features,
                      int64_t* __restrict__ tokens, int32_t* __restrict__ prev, int64_t vocab,
                      int64_t rank, int64_t feature_stride, int64_t feature_offset, int block) {
  GridDependencyPrologue();
  extern __shared__ float e[];
  const int64_t r = blockIdx.x;
  int64_t p = prev[r];
  for (int i = 0; i < block; ++i) {
    const int64_t row_id = r * block + i;
    // CopyRows' rule: a row outside the table reads as zeros.
    const bool zero = p < 0 || p >= vocab;
    float* feature = features + row_id * feature_stride + feature_offset;
    for (int64_t c = threadIdx.x; c < rank; c += blockDim.x) {
      const float v = zero ? 0.0f : embed[p * rank + c];
      e[c] = v;
      feature[c] = v;
    }
    __syncthreads();
    float* row = logits + row_id * vocab;
    float best = 0.0f;
    int64_t best_i = -1;
    for (int64_t t = threadIdx.x; t < vocab; t += blockDim.x) {
      const float v =
          __fadd_rn(row[t], dot_rows_order::DotRowsElement<kLanes>(e, head + t * rank, rank));
      row[t] = v;
      if (best_i < 0 || best < v) {
        best = v;
        best_i = t;
      }
    }
    // Every thread gets the winner; the call ends on a barrier, so e may be
    // rewritten next.
    p = static_cast<int32_t>(MarkovBlockArgmax(best, best_i));
    if (threadIdx.x == 0) tokens[row_id] = p;
  }
  if (threadIdx.x == 0) prev[r] = static_cast<int32_t>(p);
}

}  // namespace weir::kernels::cuda::decode

#endif  // WEIR_KERNELS_CUDA_DECODE_MARKOV_CUH_
