// kernels/cuda/decode/compressor_decode.cuh — device code of
// CompressorDecode. No host dependencies.
#ifndef WEIR_KERNELS_CUDA_DECODE_COMPRESSOR_DECODE_CUH_
#define WEIR_KERNELS_CUDA_DECODE_COMPRESSOR_DECODE_CUH_

#include <cstdint>

#include "kernels/common/fmath.h"
#include "kernels/cuda/grid_dependency.cuh"
#include "kernels/cuda/rounding.cuh"

namespace weir::kernels::cuda::decode {

// Grid-stride over (row t, channel c). The thread that stores channel c of
// row t is the one that pools it, so the pooled read of the new entry sees
// the store without any synchronization (and different rows use different
// slots). Pooling: the loops of CompressorPoolKernel over the slot's entries,
// which for a completing token are positions p + 1 - ratio + i at entry i.
__global__ void CompressorDecodeKernel(const float* __restrict__ kv,
                                       const float* __restrict__ score, float* kv_state,
                                       float* score_state, const int32_t* __restrict__ state_slot,
                                       const int64_t* __restrict__ positions,
                                       float* __restrict__ out, int64_t rows, int64_t dim,
                                       int ratio, int64_t slots, bool round_bf16) {
  GridDependencyPrologue();
  namespace fm = ::weir::kernels::fmath;
  const int64_t n = rows * dim;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < n;
       e += stride) {
    const int64_t t = e / dim, c = e % dim;
    const int64_t s = state_slot[t], pos = positions[t];
    if (s < 0 || pos < 0 || (slots > 0 && s >= slots)) {
      out[e] = 0.0f;
      continue;
    }
    float* kvs = kv_state + s * ratio * dim + c;     // entry i at kvs[i * dim]
    float* scs = score_state + s * ratio * dim + c;  // entry i at scs[i * dim]
    const int64_t entry = pos % ratio;
    kvs[entry * dim] = kv[e];
    scs[entry * dim] = score[e];
    if ((pos + 1) % ratio != 0) {
      out[e] = 0.0f;
      continue;
    }
    float m = scs[0];
    for (int i = 1; i < ratio; ++i) {
      const float v = scs[i * dim];
      m = m < v ? v : m;  // std::max(m, v)
    }
    float sum = 0.0f;
    for (int i = 0; i < ratio; ++i) sum = __fadd_rn(sum, fm::ExpF(__fsub_rn(scs[i * dim], m)));
    float acc = 0.0f;
    for (int i = 0; i < ratio; ++i) {
      const float w = fm::ExpF(__fsub_rn(scs[i * dim], m));
      acc = __fadd_rn(acc, __fmul_rn(kvs[i * dim], __fdiv_rn(w, sum)));
    }
    out[e] = round_bf16 ? RoundToBf16(acc) : acc;
  }
}

}  // namespace weir::kernels::cuda::decode

#endif  // WEIR_KERNELS_CUDA_DECODE_COMPRESSOR_DECODE_CUH_
