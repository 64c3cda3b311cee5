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
// the store without any synchronization (and different runs use different
// slots). With run_length, the thread of a run's first row walks the run's
// rows in order (they share a slot) and the threads of its other rows
// (run_length 0) do nothing. Pooling: the loops of CompressorPoolKernel over the slot's entries,
// which for a completing token are positions p + 1 - ratio + i at entry i.
__global__ void CompressorDecodeKernel(const float* __restrict__ kv,
                                       const float* __restrict__ score, float* kv_state,
                                       float* score_state, const int32_t* __restrict__ state_slot,
                                       const int64_t* __restrict__ positions,
                                       const int32_t* __restrict__ run_length,
                                       float* __restrict__ out, int64_t rows, int64_t dim,
                                       int ratio, int64_t state_rows, int64_t slots,
                                       bool round_bf16) {
  GridDependencyPrologue();
  namespace fm = ::weir::kernels::fmath;
  const int64_t n = rows * dim;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < n;
       e += stride) {
    const int64_t t0 = e / dim, c = e % dim;
    // The rows this thread walks, in order: its row alone, or a run's rows.
    const int64_t len = run_length != nullptr ? run_length[t0] : 1;
    for (int64_t t = t0; t < t0 + len; ++t) {
      const int64_t o = t * dim + c;
      const int64_t s = state_slot[t], pos = positions[t];
      if (s < 0 || pos < 0 || (slots > 0 && s >= slots)) {
        out[o] = 0.0f;
        continue;
      }
      // Position q at ring row q % state_rows (state_rows >= ratio).
      float* kvs = kv_state + s * state_rows * dim + c;
      float* scs = score_state + s * state_rows * dim + c;
      kvs[(pos % state_rows) * dim] = kv[o];
      scs[(pos % state_rows) * dim] = score[o];
      if ((pos + 1) % ratio != 0) {
        out[o] = 0.0f;
        continue;
      }
      // The group's entry i: position pos + 1 - ratio + i.
      const int64_t first = pos + 1 - ratio;
      auto at = [&](int i) { return ((first + i) % state_rows) * dim; };
      float m = scs[at(0)];
      for (int i = 1; i < ratio; ++i) {
        const float v = scs[at(i)];
        m = m < v ? v : m;  // std::max(m, v)
      }
      float sum = 0.0f;
      for (int i = 0; i < ratio; ++i) sum = __fadd_rn(sum, fm::ExpF(__fsub_rn(scs[at(i)], m)));
      float acc = 0.0f;
      for (int i = 0; i < ratio; ++i) {
        const float w = fm::ExpF(__fsub_rn(scs[at(i)], m));
        acc = __fadd_rn(acc, __fmul_rn(kvs[at(i)], __fdiv_rn(w, sum)));
      }
      out[o] = round_bf16 ? RoundToBf16(acc) : acc;
    }
  }
}

}  // namespace weir::kernels::cuda::decode

#endif  // WEIR_KERNELS_CUDA_DECODE_COMPRESSOR_DECODE_CUH_
