// kernels/cuda/decode/compressor_decode.cuh — device code of
// CompressorDecode. No host dependencies.
#ifndef WEIR_KERNELS_CUDA_DECODE_COMPRESSOR_DECODE_CUH_
#define WEIR_KERNELS_CUDA_DECODE_COMPRESSOR_DECODE_CUH_

#include <cstdint>

#include "kernels/common/fmath.h"
#include "kernels/cuda/grid_dependency.cuh"
#include "kernels/cuda/rounding.cuh"

namespace weir::kernels::cuda::decode {

// One group's pooled latent of one channel: the group's entries i = 0 ..
// ratio - 1 read through score(i) and kv(i); max with std::max's comparison,
// then the exp sum, then the weighted sum, i ascending, each step one fp32
// IEEE operation (CompressorPoolKernel's arithmetic). Both decode forms
// below pool through it, so they give the same bits.
template <typename Score, typename Kv>
__device__ __forceinline__ float PoolGroup(int ratio, bool round_bf16, Score score, Kv kv) {
  namespace fm = ::weir::kernels::fmath;
  float m = score(0);
  for (int i = 1; i < ratio; ++i) {
    const float v = score(i);
    m = m < v ? v : m;  // std::max(m, v)
  }
  float sum = 0.0f;
  for (int i = 0; i < ratio; ++i) sum = __fadd_rn(sum, fm::ExpF(__fsub_rn(score(i), m)));
  float acc = 0.0f;
  for (int i = 0; i < ratio; ++i) {
    const float w = fm::ExpF(__fsub_rn(score(i), m));
    acc = __fadd_rn(acc, __fmul_rn(kv(i), __fdiv_rn(w, sum)));
  }
  return round_bf16 ? RoundToBf16(acc) : acc;
}

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
      out[o] = PoolGroup(
          ratio, round_bf16, [&](int i) { return scs[at(i)]; }, [&](int i) { return kvs[at(i)]; });
    }
  }
}

// CompressorDecodeParams::parallel_rows, in two kernels, a thread per (row
// t, channel c) each. Row t + d belongs to row t's run when it exists with
// the same slot at position pos + d (a run's rows are consecutive positions
// of one slot; no other row uses that slot).
__device__ __forceinline__ bool InRunOf(const int32_t* __restrict__ state_slot,
                                        const int64_t* __restrict__ positions, int64_t rows,
                                        int64_t t, int64_t d, int64_t s, int64_t pos) {
  const int64_t u = t + d;
  return u >= 0 && u < rows && state_slot[u] == s && positions[u] == pos + d;
}

// Kernel 1: every row's latent. A group entry at position q comes from the
// input row of q where q is in the row's run (what the serial walk stored in
// the ring just before), else from the ring as earlier steps left it (no row
// of this run overwrote it before the serial walk read it: the group spans
// fewer than state_rows positions). The arithmetic is CompressorDecodeKernel's.
__global__ void CompressorPoolRowsKernel(
    const float* __restrict__ kv, const float* __restrict__ score,
    const float* __restrict__ kv_state, const float* __restrict__ score_state,
    const int32_t* __restrict__ state_slot, const int64_t* __restrict__ positions,
    float* __restrict__ out, int64_t rows, int64_t dim, int ratio, int64_t state_rows,
    int64_t slots, bool round_bf16) {
  GridDependencyPrologue();
  const int64_t n = rows * dim;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < n;
       e += stride) {
    const int64_t t = e / dim, c = e % dim;
    const int64_t s = state_slot[t], pos = positions[t];
    if (s < 0 || pos < 0 || (slots > 0 && s >= slots) || (pos + 1) % ratio != 0) {
      out[e] = 0.0f;
      continue;
    }
    const int64_t first = pos + 1 - ratio;
    const int64_t block = s * state_rows * dim + c;
    auto value = [&](const float* input, const float* ring, int i) {
      const int64_t d = first + i - pos;  // <= 0
      if (InRunOf(state_slot, positions, rows, t, d, s, pos)) return input[(t + d) * dim + c];
      return ring[block + ((first + i) % state_rows) * dim];
    };
    out[e] = PoolGroup(
        ratio, round_bf16, [&](int i) { return value(score, score_state, i); },
        [&](int i) { return value(kv, kv_state, i); });
  }
}

// Kernel 2, after kernel 1: the ring as the serial walk leaves it. Row t
// stores its values unless a later row of its run lands on the same ring
// row (the serial walk's later store wins).
__global__ void CompressorStateRowsKernel(const float* __restrict__ kv,
                                          const float* __restrict__ score, float* kv_state,
                                          float* score_state,
                                          const int32_t* __restrict__ state_slot,
                                          const int64_t* __restrict__ positions, int64_t rows,
                                          int64_t dim, int64_t state_rows, int64_t slots) {
  GridDependencyPrologue();
  const int64_t n = rows * dim;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < n;
       e += stride) {
    const int64_t t = e / dim, c = e % dim;
    const int64_t s = state_slot[t], pos = positions[t];
    if (s < 0 || pos < 0 || (slots > 0 && s >= slots)) continue;
    if (InRunOf(state_slot, positions, rows, t, state_rows, s, pos)) continue;
    const int64_t at = s * state_rows * dim + (pos % state_rows) * dim + c;
    kv_state[at] = kv[e];
    score_state[at] = score[e];
  }
}

}  // namespace weir::kernels::cuda::decode

#endif  // WEIR_KERNELS_CUDA_DECODE_COMPRESSOR_DECODE_CUH_
