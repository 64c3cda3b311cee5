// kernels/cuda/moe/engram.cuh — device code of EngramLookup and EngramGate.
// No host dependencies.
#ifndef WEIR_KERNELS_CUDA_MOE_ENGRAM_CUH_
#define WEIR_KERNELS_CUDA_MOE_ENGRAM_CUH_

#include <cstdint>

#include "kernels/cuda/moe/numerics.cuh"

namespace weir::kernels::cuda::moe {

// One thread per out[i, c].
__global__ void EngramLookupKernel(const uint8_t* __restrict__ table,
                                   const uint8_t* __restrict__ scales,
                                   const int64_t* __restrict__ ids, float* __restrict__ out,
                                   int32_t* bad_count, int64_t table_rows, int64_t dim,
                                   int64_t num_ids) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= num_ids * dim) return;
  const int64_t row = ids[i / dim], c = i % dim;
  if (row < 0 || row >= table_rows) {
    out[i] = __uint_as_float(0x7FC00000u);
    if (c == 0 && bad_count != nullptr) atomicAdd(bad_count, 1);
    return;
  }
  const float s = E8m0Value(scales[row * (dim / 32) + c / 32]);
  out[i] = __fmul_rn(E4m3Value(table[row * dim + c]), s);
}

// One block per (token, stream).
template <int kThreads>
__global__ void EngramGateKernel(float* x, const float* __restrict__ key,
                                 const float* __restrict__ value, const float* __restrict__ weight,
                                 const uint8_t* __restrict__ token_mask, int n, int64_t dim,
                                 float eps, float inv_sqrt_dim, bool round_bf16) {
  __shared__ float s_f[kThreads / 32];
  __shared__ double s_d[kThreads / 32];
  const int64_t tk = blockIdx.x, t = tk / n, k = tk % n;
  float* xs = x + tk * dim;
  const float* ks = key + tk * dim;
  const float* ws = weight + k * dim;
  const float* vs = value + t * dim;
  const bool on = token_mask == nullptr || token_mask[t] != 0;
  float gate = 0.0f;
  if (on) {  // uniform over the block
    float dot = 0.0f;
    double sx = 0.0, sk = 0.0;
    for (int64_t c = threadIdx.x; c < dim; c += kThreads) {
      const float xv = xs[c], kv = ks[c];
      dot = __fadd_rn(dot, __fmul_rn(__fmul_rn(xv, ws[c]), kv));
      sx += static_cast<double>(xv) * static_cast<double>(xv);
      sk += static_cast<double>(kv) * static_cast<double>(kv);
    }
    dot = BlockSum<kThreads>(dot, s_f);
    sx = BlockSum<kThreads>(sx, s_d);
    sk = BlockSum<kThreads>(sk, s_d);
    const float fd = static_cast<float>(dim);
    const float rx = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(static_cast<float>(sx), fd), eps)));
    const float rk = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(static_cast<float>(sk), fd), eps)));
    dot = __fmul_rn(__fmul_rn(dot, __fmul_rn(rx, rk)), inv_sqrt_dim);
    const float mag = __fsqrt_rn(fmaxf(fabsf(dot), 1e-6f));
    gate = SigmoidF(copysignf(mag, dot));
  }
  for (int64_t c = threadIdx.x; c < dim; c += kThreads) {
    const float v = __fadd_rn(xs[c], __fmul_rn(gate, vs[c]));
    xs[c] = round_bf16 ? RoundBf16(v) : v;
  }
}

}  // namespace weir::kernels::cuda::moe

#endif  // WEIR_KERNELS_CUDA_MOE_ENGRAM_CUH_
