// kernels/cuda/moe/engram.cuh — device code of EngramLookup and EngramGate.
// No host dependencies.
#ifndef WEIR_KERNELS_CUDA_MOE_ENGRAM_CUH_
#define WEIR_KERNELS_CUDA_MOE_ENGRAM_CUH_

#include <cstdint>

#include "kernels/cuda/grid_dependency.cuh"
#include "kernels/cuda/moe/numerics.cuh"

namespace weir::kernels::cuda::moe {

// One thread per out[i, c].
__global__ void EngramLookupKernel(const uint8_t* __restrict__ table,
                                   const uint8_t* __restrict__ scales,
                                   const int64_t* __restrict__ ids, float* __restrict__ out,
                                   int32_t* bad_count, int64_t table_rows, int64_t dim,
                                   int64_t num_ids, bool round_bf16) {
  GridDependencyPrologue();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= num_ids * dim) return;
  const int64_t row = ids[i / dim], c = i % dim;
  if (row < 0 || row >= table_rows) {
    out[i] = __uint_as_float(0x7FC00000u);
    if (c == 0 && bad_count != nullptr) atomicAdd(bad_count, 1);
    return;
  }
  const float s = E8m0ToFloat(scales[row * (dim / 32) + c / 32]);
  const float v = __fmul_rn(E4m3ToFloat(table[row * dim + c]), s);
  out[i] = round_bf16 ? RoundToBf16(v) : v;
}

// One block per (token, stream). The first warp takes the three sums in
// fmath::LaneSum order (the dot in fp32, the squares in double), as the CPU
// kernel does, and one lane forms the gate: bit-identical to kernels/cpu.
template <int kThreads>
__global__ void EngramGateKernel(float* x, const float* __restrict__ key,
                                 const float* __restrict__ value, const float* __restrict__ weight,
                                 const uint8_t* __restrict__ token_mask, int n, int64_t dim,
                                 float eps, float inv_sqrt_dim, bool round_bf16,
                                 int64_t key_token_stride, int64_t value_token_stride) {
  GridDependencyPrologue();
  namespace fm = ::weir::kernels::fmath;
  __shared__ float s_gate;
  const int64_t tk = blockIdx.x, t = tk / n, k = tk % n;
  float* xs = x + tk * dim;
  const float* ks = key + t * key_token_stride + k * dim;
  const float* ws = weight + k * dim;
  const float* vs = value + t * value_token_stride;
  const bool on = token_mask == nullptr || token_mask[t] != 0;
  if (threadIdx.x < 32) {
    float gate = 0.0f;
    if (on) {
      float dot = fm::WarpLaneSum<float>(
          dim, [&](int64_t c) { return fm::FMul(fm::FMul(xs[c], ws[c]), ks[c]); });
      const double sx = fm::WarpLaneSum<double>(dim, [&](int64_t c) {
        const double v = xs[c];
        return fm::DMul(v, v);
      });
      const double sk = fm::WarpLaneSum<double>(dim, [&](int64_t c) {
        const double v = ks[c];
        return fm::DMul(v, v);
      });
      const float fd = static_cast<float>(dim);
      const float rx = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(static_cast<float>(sx), fd), eps)));
      const float rk = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(static_cast<float>(sk), fd), eps)));
      dot = __fmul_rn(__fmul_rn(dot, __fmul_rn(rx, rk)), inv_sqrt_dim);
      const float ad = fabsf(dot);
      const float mag = __fsqrt_rn(ad < 1e-6f ? 1e-6f : ad);  // std::max(|dot|, 1e-6f)
      gate = SigmoidF(copysignf(mag, dot));
    }
    if (threadIdx.x == 0) s_gate = gate;
  }
  __syncthreads();
  const float gate = s_gate;
  for (int64_t c = threadIdx.x; c < dim; c += kThreads) {
    const float v = __fadd_rn(xs[c], __fmul_rn(gate, vs[c]));
    xs[c] = round_bf16 ? RoundToBf16(v) : v;
  }
}

}  // namespace weir::kernels::cuda::moe

#endif  // WEIR_KERNELS_CUDA_MOE_ENGRAM_CUH_
