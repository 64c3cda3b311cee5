// kernels/cuda/attention/compressor_pool.cuh — device code of CompressorPool.
// No host dependencies.
#ifndef WEIR_KERNELS_CUDA_ATTENTION_COMPRESSOR_POOL_CUH_
#define WEIR_KERNELS_CUDA_ATTENTION_COMPRESSOR_POOL_CUH_

#include <cstdint>

#include "kernels/common/fmath.h"
#include "kernels/cuda/grid_dependency.cuh"

namespace weir::kernels::cuda {

// One thread per (emitted group e, channel c); the CPU kernel's loops with
// the same roundings and exp (fmath::ExpF): bit-identical. Slot i of group j = first + e
// is position j*r + i: a token of this chunk when at or past start_pos, else
// the incoming state (only in the first group, when start_pos % r != 0).
__global__ void CompressorPoolKernel(const float* __restrict__ kv, const float* __restrict__ score,
                                     const float* __restrict__ kv_state,
                                     const float* __restrict__ score_state,
                                     float* __restrict__ out, int64_t start_pos, int64_t dim,
                                     int ratio, int64_t count) {
  GridDependencyPrologue();
  const int64_t id = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (id >= count * dim) return;
  const int64_t e = id / dim, c = id % dim;
  const int64_t group_start = (start_pos / ratio + e) * ratio;
  auto at = [&](const float* chunk, const float* state, int i) {
    const int64_t pos = group_start + i;
    return pos >= start_pos ? chunk[(pos - start_pos) * dim + c] : state[i * dim + c];
  };
  float m = at(score, score_state, 0);
  for (int i = 1; i < ratio; ++i) {
    const float s = at(score, score_state, i);
    m = m < s ? s : m;  // std::max(m, s)
  }
  float sum = 0.0f;
  namespace fm = ::weir::kernels::fmath;
  for (int i = 0; i < ratio; ++i) {
    sum = __fadd_rn(sum, fm::ExpF(__fsub_rn(at(score, score_state, i), m)));
  }
  float acc = 0.0f;
  for (int i = 0; i < ratio; ++i) {
    const float w = fm::ExpF(__fsub_rn(at(score, score_state, i), m));
    acc = __fadd_rn(acc, __fmul_rn(at(kv, kv_state, i), __fdiv_rn(w, sum)));
  }
  out[e * dim + c] = acc;
}

// One thread per (slot i, channel c): the slot takes the chunk's last token
// at a position congruent to i mod r, if there is one.
__global__ void CompressorStateKernel(const float* __restrict__ kv, const float* __restrict__ score,
                                      float* __restrict__ kv_state,
                                      float* __restrict__ score_state, int64_t start_pos,
                                      int64_t tokens, int64_t dim, int ratio) {
  GridDependencyPrologue();
  const int64_t id = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (id >= static_cast<int64_t>(ratio) * dim) return;
  const int64_t i = id / dim, c = id % dim;
  const int64_t last = start_pos + tokens - 1;
  const int64_t pos = last - ((last % ratio - i + ratio) % ratio);
  if (pos < start_pos) return;
  kv_state[i * dim + c] = kv[(pos - start_pos) * dim + c];
  score_state[i * dim + c] = score[(pos - start_pos) * dim + c];
}

}  // namespace weir::kernels::cuda

#endif  // WEIR_KERNELS_CUDA_ATTENTION_COMPRESSOR_POOL_CUH_
