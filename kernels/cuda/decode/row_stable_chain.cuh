// kernels/cuda/decode/row_stable_chain.cuh — one lane of the row-stable order
// (kernels/common/row_stable.h) over a chunk staged in shared memory, software
// pipelined. No host dependencies.
#ifndef WEIR_KERNELS_CUDA_DECODE_ROW_STABLE_CHAIN_CUH_
#define WEIR_KERNELS_CUDA_DECODE_ROW_STABLE_CHAIN_CUH_

#include "kernels/common/row_stable.h"

namespace weir::kernels::cuda::decode {

// acc = RowStableStep(acc, xs[j], ws[j]) for j = l, l + 4, ..., l + 4 (kSteps
// - 1), ascending: the plain loop's steps in the plain loop's order (so its
// bits), but the operands of the next kBatch steps are read from shared
// memory while the current kBatch additions run. Written as the plain loop,
// the compiler issues a batch's loads only after the previous batch's
// additions, and every batch waits out the shared-memory latency on the
// serial chain (about 18 cycles a step on an H200 against 4.4 for the
// dependent addition alone).
template <int kSteps, int kBatch>
__device__ __forceinline__ float RowStableChainPipelined(float acc, const float* xs,
                                                         const float* ws, int l) {
  static_assert(kSteps % kBatch == 0 && kSteps >= kBatch, "whole batches");
  float xa[kBatch], wa[kBatch];
#pragma unroll
  for (int i = 0; i < kBatch; ++i) {
    xa[i] = xs[l + 4 * i];
    wa[i] = ws[l + 4 * i];
  }
#pragma unroll 1
  for (int b = kBatch; b < kSteps; b += kBatch) {
    float xn[kBatch], wn[kBatch];
#pragma unroll
    for (int i = 0; i < kBatch; ++i) {
      xn[i] = xs[l + 4 * (b + i)];
      wn[i] = ws[l + 4 * (b + i)];
    }
#pragma unroll
    for (int i = 0; i < kBatch; ++i) acc = RowStableStep(acc, xa[i], wa[i]);
#pragma unroll
    for (int i = 0; i < kBatch; ++i) {
      xa[i] = xn[i];
      wa[i] = wn[i];
    }
  }
#pragma unroll
  for (int i = 0; i < kBatch; ++i) acc = RowStableStep(acc, xa[i], wa[i]);
  return acc;
}

}  // namespace weir::kernels::cuda::decode

#endif  // WEIR_KERNELS_CUDA_DECODE_ROW_STABLE_CHAIN_CUH_
