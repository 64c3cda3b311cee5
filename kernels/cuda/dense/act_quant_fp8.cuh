// kernels/cuda/dense/act_quant_fp8.cuh — device code of ActQuantFp8. No host
// dependencies. Conversions from fake_quant.cuh (they mirror numeric_formats.h).
#ifndef WEIR_KERNELS_CUDA_DENSE_ACT_QUANT_FP8_CUH_
#define WEIR_KERNELS_CUDA_DENSE_ACT_QUANT_FP8_CUH_

#include <cstdint>

#include "kernels/cuda/dense/fake_quant.cuh"
#include "kernels/cuda/dense/fp8_bf16.cuh"
#include "kernels/cuda/grid_dependency.cuh"

namespace weir::kernels::cuda::dense {

// The UE8M0 scale code of a finite block whose largest |x| is `amax`:
// 2^ceil(log2(max(amax, 1e-4) * fl(1/448))), as kernels/cpu/quant.h
// QuantizeFp8 (fl(1/448) is double 1/448 rounded to fp32, as the CPU has it).
// Normal (code >= 105) thanks to the floor. Shared with the fused epilogues
// that quantize their output for the next GEMM (kernels/cuda/moe).
__device__ __forceinline__ uint32_t Fp8ActScaleCode(float amax) {
  const float inv448 = static_cast<float>(1.0 / 448.0);
  return Ue8m0CeilCode(__fmul_rn(fmaxf(amax, 1e-4f), inv448));
}

// The e4m3 code of v in a block of scale s = E8m0ToFloat(Fp8ActScaleCode(..)):
// e4m3(clamp(v / s, +-448)), nearest even.
__device__ __forceinline__ uint32_t Fp8ActCode(float v, float s) {
  return FloatToE4m3(fminf(fmaxf(__fdiv_rn(v, s), -448.0f), 448.0f));
}

// Loads 8 consecutive elements (16 bytes of fp32 x2, or 16 bytes of bf16).
template <bool kBf16>
__device__ __forceinline__ void LoadEight(const void* x, int64_t first, float (&v)[8]) {
  if constexpr (kBf16) {
    const uint4 raw = *reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(x) + first);
    const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      v[2 * i] = __uint_as_float(words[i] << 16);              // element 2i: low half
      v[2 * i + 1] = __uint_as_float(words[i] & 0xFFFF0000u);  // element 2i + 1: high half
    }
  } else {
    const float4* p = reinterpret_cast<const float4*>(static_cast<const float*>(x) + first);
    const float4 a = p[0], b = p[1];
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w;
    v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
  }
}

// Quantizes the 8 consecutive elements v of one lane, elements [8t, 8t + 8)
// of a row: the 4 lanes of a 32-block are consecutive lanes (lane % 4 = t %
// 4), so amax and the finite flag are 2-step shuffle reductions. Every lane
// of the warp must call it (inactive lanes with zeros; a block's 4 lanes are
// active together). An active lane writes its 8 codes at codes8 (8-byte
// aligned) and the block's first lane the scale code at *scale; with dq8
// (16-byte aligned), also the bf16 bits of the values the codes stand for
// (Fp8ToBf16Eight: Fp8ActBf16's of these codes).
__device__ __forceinline__ void ActQuantEight(const float (&v)[8], bool active, uint8_t* codes8,
                                              uint8_t* scale, uint16_t* dq8 = nullptr) {
  float amax = 0.0f;
  int nonfinite = 0;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    amax = fmaxf(amax, fabsf(v[i]));
    nonfinite |= isfinite(v[i]) ? 0 : 1;
  }
#pragma unroll
  for (int offset = 1; offset < 4; offset *= 2) {
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, offset));
    nonfinite |= __shfl_xor_sync(0xffffffffu, nonfinite, offset);
  }
  if (!active) return;
  uint32_t scale_code = 0xFFu;
  uint32_t packed[2] = {0x7F7F7F7Fu, 0x7F7F7F7Fu};
  if (!nonfinite) {
    scale_code = Fp8ActScaleCode(amax);
    const float s = E8m0ToFloat(scale_code);  // normal: code >= 105 after the floor
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      uint32_t word = 0;
#pragma unroll
      for (int i = 0; i < 4; ++i) word |= Fp8ActCode(v[4 * h + i], s) << (8 * i);
      packed[h] = word;
    }
  }
  *reinterpret_cast<uint2*>(codes8) = make_uint2(packed[0], packed[1]);
  if ((threadIdx.x & 3) == 0) *scale = static_cast<uint8_t>(scale_code);
  if (dq8 != nullptr) {
    uint32_t dq[4];
    fp8_gemm::Fp8ToBf16Eight(packed[0], packed[1], scale_code, dq);
    *reinterpret_cast<uint4*>(dq8) = make_uint4(dq[0], dq[1], dq[2], dq[3]);
  }
}

// Thread t quantizes elements [8t, 8t + 8). num_threads = n / 8 (a multiple
// of 4).
template <bool kBf16>
__global__ void ActQuantFp8Kernel(const void* __restrict__ x, uint8_t* __restrict__ codes,
                                  uint8_t* __restrict__ scales, int64_t num_threads,
                                  const int64_t* __restrict__ row_count, int64_t row_threads) {
  GridDependencyPrologue();
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  // With row_count, the threads of rows past it idle (a row's 32-blocks never
  // span two rows, so a 32-block's lanes agree).
  const int64_t limit = row_count == nullptr
                            ? num_threads
                            : min(num_threads, max(*row_count, int64_t{0}) * row_threads);
  const bool active = t < limit;
  float v[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  if (active) LoadEight<kBf16>(x, t * 8, v);
  ActQuantEight(v, active, codes + t * 8, scales + t / 4);
}

// A block's row of `dim` floats (dim % 32 == 0, row 32-byte aligned) that
// its threads have just written: after a barrier, its FP8 form as
// ActQuantFp8 gives it (the same ActQuantEight), codes [dim] and scales
// [dim / 32]. Every thread of the block calls it (kThreads % 32 == 0).
// With dq16 (16-byte aligned), also the bf16 bits of the values the codes
// stand for (ActQuantEight's dq8), [dim].
template <int kThreads>
__device__ __forceinline__ void ActQuantRowAfterBarrier(const float* row, int64_t dim,
                                                        uint8_t* codes, uint8_t* scales,
                                                        uint16_t* dq16 = nullptr) {
  static_assert(kThreads % 32 == 0, "whole warps");
  __syncthreads();  // the row's global writes are visible to the block
  const int64_t groups = dim / 8;
  for (int64_t base = 0; base < groups; base += kThreads) {
    const int64_t g = base + threadIdx.x;
    const bool active = g < groups;
    float v[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    if (active) LoadEight<false>(row, g * 8, v);
    ActQuantEight(v, active, codes + g * 8, scales + g / 4,
                  dq16 != nullptr ? dq16 + g * 8 : nullptr);
  }
}

}  // namespace weir::kernels::cuda::dense

#endif  // WEIR_KERNELS_CUDA_DENSE_ACT_QUANT_FP8_CUH_
