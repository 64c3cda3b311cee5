// kernels/cuda/rope.cuh — device code of ApplyRope. No host dependencies.
#ifndef WEIR_KERNELS_CUDA_ROPE_CUH_
#define WEIR_KERNELS_CUDA_ROPE_CUH_

#include <cstdint>

#include "kernels/cuda/grid_dependency.cuh"
#include "kernels/cuda/rope_pair.cuh"
#include "kernels/cuda/rounding.cuh"

namespace weir::kernels::cuda {

// One thread per (token, head, pair). cos_sin_rows > 0 selects the
// by-position table: row positions[token], NaN outside [0, cos_sin_rows).
__global__ void RopeKernel(float* x, const int64_t* __restrict__ positions,
                           const float* __restrict__ freqs,
                           const float* __restrict__ cos_sin, int64_t cos_sin_rows,
                           int64_t num_pairs_total, int num_heads, int head_dim, int rope_dim,
                           bool inverse, bool round_bf16) {
  GridDependencyPrologue();
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= num_pairs_total) return;
  const int half = rope_dim / 2;
  const int pair = static_cast<int>(idx % half);
  const int64_t vec = idx / half;  // token * num_heads + head
  const int64_t token = vec / num_heads;
  float c, s;
  if (cos_sin != nullptr && cos_sin_rows > 0) {  // the CPU's values, by position
    const float2 cs = RopeCosSinAt(cos_sin, cos_sin_rows, positions[token], half, pair);
    c = cs.x;
    s = cs.y;
  } else if (cos_sin != nullptr) {  // the CPU's values, by token
    c = cos_sin[(token * half + pair) * 2];
    s = cos_sin[(token * half + pair) * 2 + 1];
  } else {
    const float angle = __fmul_rn(static_cast<float>(positions[token]), freqs[pair]);
    c = cosf(angle);
    s = sinf(angle);
  }
  float* v = x + vec * head_dim + (head_dim - rope_dim) + 2 * pair;
  const float a = v[0], b = v[1];
  const float2 r = RopeRotatePair(a, b, c, s, inverse);
  float r0 = r.x, r1 = r.y;
  if (round_bf16) {
    r0 = RoundToBf16(r0);
    r1 = RoundToBf16(r1);
  }
  v[0] = r0;
  v[1] = r1;
}

}  // namespace weir::kernels::cuda

#endif  // WEIR_KERNELS_CUDA_ROPE_CUH_
