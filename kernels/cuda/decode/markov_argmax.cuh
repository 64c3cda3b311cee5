// kernels/cuda/decode/markov_argmax.cuh — MarkovArgmax's CTA shape and its
// first-maximum reduction (no kernels here, so any .cu may include it).

#ifndef WEIR_KERNELS_CUDA_DECODE_MARKOV_ARGMAX_CUH_
#define WEIR_KERNELS_CUDA_DECODE_MARKOV_ARGMAX_CUH_

#include <cstdint>

namespace weir::kernels::cuda::decode {

inline constexpr int kMarkovThreads = 256;

// The first index of the CTA's largest value (MarkovArgmax's rule): thread t
// brings its own first maximum (best, best_i; best_i < 0 for none); a tree
// over kMarkovThreads threads keeps the larger value, the lower index on
// equal ones. Returns the winner's index to every thread.
// REQUIRES: blockDim.x == kMarkovThreads; every thread of the CTA calls it.
__device__ inline int64_t MarkovBlockArgmax(float best, int64_t best_i) {
  __shared__ float s_best[kMarkovThreads];
  __shared__ int64_t s_index[kMarkovThreads];
  s_best[threadIdx.x] = best;
  s_index[threadIdx.x] = best_i;
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) {
      const float ov = s_best[threadIdx.x + half];
      const int64_t oi = s_index[threadIdx.x + half];
      const int64_t mi = s_index[threadIdx.x];
      if (oi >= 0 &&
          (mi < 0 || s_best[threadIdx.x] < ov || (s_best[threadIdx.x] == ov && oi < mi))) {
        s_best[threadIdx.x] = ov;
        s_index[threadIdx.x] = oi;
      }
    }
    __syncthreads();
  }
  const int64_t winner = s_index[0];
  __syncthreads();  // s_index may be rewritten by the caller's next call
  return winner;
}

}  // namespace weir::kernels::cuda::decode

#endif  // WEIR_KERNELS_CUDA_DECODE_MARKOV_ARGMAX_CUH_
