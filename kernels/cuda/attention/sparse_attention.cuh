// kernels/cuda/attention/sparse_attention.cuh — device code of SparseAttention.
// No host dependencies.
#ifndef WEIR_KERNELS_CUDA_ATTENTION_SPARSE_ATTENTION_CUH_
#define WEIR_KERNELS_CUDA_ATTENTION_SPARSE_ATTENTION_CUH_

#include <cstdint>

#include "kernels/common/fmath.h"
#include "kernels/cuda/grid_dependency.cuh"
#include "kernels/cuda/rounding.cuh"

namespace weir::kernels::cuda {

// One block per (query, head), row = query * heads + head. Dynamic shared
// memory: topk floats (logits, then probabilities) + topk ints (the index row
// with invalid entries replaced by -1). Bit-identical to the CPU kernel: the
// dots in fmath::LaneSum order (one warp per slot), fmath::ExpF, the
// denominator summed by one thread in list order, each output channel summed
// in list order, every operation rounded on its own (no FMA).
template <int kThreads>
__global__ void SparseAttentionKernel(const float* __restrict__ q, const float* __restrict__ kv,
                                      const float* __restrict__ sink,
                                      const int32_t* __restrict__ index, float* __restrict__ out,
                                      int heads, int head_dim, int64_t kv_len, int topk,
                                      float scale, bool round_bf16) {
  GridDependencyPrologue();
  constexpr int kWarps = kThreads / 32;
  extern __shared__ float shared[];
  float* z = shared;
  int32_t* slots = reinterpret_cast<int32_t*>(shared + topk);
  __shared__ float partial[kWarps];
  __shared__ float row_max;
  __shared__ float row_denom;

  namespace fm = ::weir::kernels::fmath;
  const int64_t row = blockIdx.x;
  const int64_t query = row / heads;
  const int head = static_cast<int>(row % heads);
  const float* qv = q + row * head_dim;
  float* o = out + row * head_dim;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

  for (int j = threadIdx.x; j < topk; j += kThreads) {
    const int32_t t = index[query * topk + j];
    slots[j] = (t >= 0 && t < kv_len) ? t : -1;
  }
  __syncthreads();

  // Logits: one warp per slot.
  float local_max = -INFINITY;
  for (int j = warp; j < topk; j += kWarps) {
    const int32_t t = slots[j];
    if (t < 0) {
      if (lane == 0) z[j] = -INFINITY;
      continue;
    }
    const float* kr = kv + static_cast<int64_t>(t) * head_dim;
    const float dot =
        fm::WarpLaneSum<float>(head_dim, [&](int64_t c) { return fm::FMul(qv[c], kr[c]); });
    const float zj = fm::FMul(scale, dot);
    if (lane == 0) z[j] = zj;
    // As the CPU's std::max(m, z): a NaN logit never becomes the maximum.
    local_max = local_max < zj ? zj : local_max;
  }
  if (lane == 0) partial[warp] = local_max;
  __syncthreads();
  if (threadIdx.x == 0) {
    float m = -INFINITY;
    for (int w = 0; w < kWarps; ++w) m = m < partial[w] ? partial[w] : m;
    row_max = m;
  }
  __syncthreads();
  const float m = row_max;
  if (m == -INFINITY) {  // no valid slot (block-uniform)
    for (int c = threadIdx.x; c < head_dim; c += kThreads) o[c] = 0.0f;
    return;
  }

  // Probabilities, then their sum in list order (one thread, as the CPU).
  for (int j = threadIdx.x; j < topk; j += kThreads) {
    if (slots[j] < 0) continue;
    z[j] = fm::ExpF(fm::FSub(z[j], m));
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    float denom = 0.0f;
    for (int j = 0; j < topk; ++j) {
      if (slots[j] >= 0) denom = fm::FAdd(denom, z[j]);
    }
    row_denom = fm::FAdd(denom, fm::ExpF(fm::FSub(sink[head], m)));
  }
  __syncthreads();
  const float denom = row_denom;

  // Output: channel c sums over the index row in list order, as the CPU does.
  for (int c = threadIdx.x; c < head_dim; c += kThreads) {
    float acc = 0.0f;
    for (int j = 0; j < topk; ++j) {
      const int32_t t = slots[j];
      if (t < 0) continue;
      acc = __fadd_rn(acc, __fmul_rn(z[j], kv[static_cast<int64_t>(t) * head_dim + c]));
    }
    const float v = __fdiv_rn(acc, denom);
    o[c] = round_bf16 ? RoundToBf16(v) : v;
  }
}

}  // namespace weir::kernels::cuda

#endif  // WEIR_KERNELS_CUDA_ATTENTION_SPARSE_ATTENTION_CUH_
