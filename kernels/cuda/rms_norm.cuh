// kernels/cuda/rms_norm.cuh — device code of RmsNorm. No host dependencies.
#ifndef WEIR_KERNELS_CUDA_RMS_NORM_CUH_
#define WEIR_KERNELS_CUDA_RMS_NORM_CUH_

#include <cstdint>

#include "kernels/common/fmath.h"
#include "kernels/cuda/dense/act_quant_fp8.cuh"
#include "kernels/cuda/grid_dependency.cuh"
#include "kernels/cuda/rounding.cuh"

namespace weir::kernels::cuda {

// The longest row (bytes) a kernel stages in dynamic shared memory without
// raising its limit: the default 48 KiB less room for the static shared
// variables beside it (NormalizeRow's inv_rms).
inline constexpr int64_t kStagedRowMaxBytes = 48 * 1024 - 128;

// One block per row. The first warp sums the squares in double in the
// fixed LaneSum order of kernels/common/fmath.h (the CPU kernel's order);
// then every thread scales its float4s. Bit-identical to kernels/cpu RmsNorm
// (with round_bf16: to it followed by RoundToBf16).
//
// kStaged (dim * 4 bytes of dynamic shared memory): every thread first
// copies its float4s of the row into shared memory, so the warp's chain of
// additions reads shared memory instead of waiting on a global load per
// term, and the scaling reads the staged copy; the order of the sum, and so
// the bits, are the same.
//
// NormalizeRow is that kernel's work after the row is in place (global or
// shared memory); HcCollapseNorm (moe/mhc.cuh) stages a collapsed row and
// calls it, so the fused launch gives the bits of HcCollapse then RmsNorm.
// With `codes` (uniform over the block; dim % 32 == 0) it then writes the
// output row's FP8 form, codes [dim] and UE8M0 scales [dim / 32], the bits
// ActQuantFp8 gives over out_row (dense/act_quant_fp8.cuh's ActQuantEight).
// Host check of NormalizeRow's optional FP8 output (RmsNorm, HcCollapseNorm):
// none, or codes and scales with dim % 32 == 0, codes 8-byte and the output
// rows 32-byte aligned (ActQuantRowAfterBarrier's loads and stores).
inline bool NormFp8OutputOk(const float* out, const uint8_t* codes, const uint8_t* scales,
                            int64_t dim) {
  if (codes == nullptr && scales == nullptr) return true;
  return codes != nullptr && scales != nullptr && dim % 32 == 0 &&
         reinterpret_cast<uintptr_t>(codes) % 8 == 0 && reinterpret_cast<uintptr_t>(out) % 32 == 0;
}

// NormalizeRow over the float4 columns [lo4, hi4) of the row only: the sum
// of squares is still the whole row's (warp 0, the same chain), then the
// block scales and writes those columns and, with `codes` (the whole row's
// codes and scales; lo4 % 8 == 0, and hi4 % 8 == 0 or hi4 == dim / 4), their
// FP8 form. The clustered mHC collapse-norm (moe/mhc.cuh) gives each CTA of
// a token's cluster its columns this way; every value has NormalizeRow's
// bits.
template <int kThreads>
__device__ __forceinline__ void NormalizeRowColumns(
    const float* src, const float* __restrict__ weight, float* out_row, int64_t dim, int64_t lo4,
    int64_t hi4, float eps, bool round_bf16, uint8_t* codes = nullptr, uint8_t* scales = nullptr,
    uint16_t* bf16_row = nullptr, uint16_t* dq16_row = nullptr) {
  namespace fm = ::weir::kernels::fmath;
  const float4* src4 = reinterpret_cast<const float4*>(src);
  __shared__ float inv_rms;
  if (threadIdx.x < 32) {
    const double total = fm::WarpLaneSum<double>(dim, [&](int64_t i) {
      const double v = src[i];
      return fm::DMul(v, v);
    });
    if (threadIdx.x == 0) {
      const float var = fm::FDiv(static_cast<float>(total), static_cast<float>(dim));
      inv_rms = fm::FDiv(1.0f, fm::FSqrt(fm::FAdd(var, eps)));
    }
  }
  __syncthreads();
  float4* out4 = reinterpret_cast<float4*>(out_row);
  const float4* w4 = reinterpret_cast<const float4*>(weight);
  for (int64_t i = lo4 + threadIdx.x; i < hi4; i += kThreads) {
    float4 v = src4[i];
    const float4 w = weight != nullptr ? w4[i] : make_float4(1.f, 1.f, 1.f, 1.f);
    v.x = __fmul_rn(w.x, __fmul_rn(v.x, inv_rms));
    v.y = __fmul_rn(w.y, __fmul_rn(v.y, inv_rms));
    v.z = __fmul_rn(w.z, __fmul_rn(v.z, inv_rms));
    v.w = __fmul_rn(w.w, __fmul_rn(v.w, inv_rms));
    if (round_bf16) {
      v.x = RoundToBf16(v.x);
      v.y = RoundToBf16(v.y);
      v.z = RoundToBf16(v.z);
      v.w = RoundToBf16(v.w);
    }
    out4[i] = v;
    if (bf16_row != nullptr) {  // ToBf16's bits of each value (8-byte aligned row)
      auto pair = [](float lo, float hi) {
        return static_cast<uint32_t>(Bf16BitsOf(lo)) |
               (static_cast<uint32_t>(Bf16BitsOf(hi)) << 16);
      };
      reinterpret_cast<uint2*>(bf16_row)[i] = make_uint2(pair(v.x, v.y), pair(v.z, v.w));
    }
  }
  if (codes != nullptr) {
    dense::ActQuantRowAfterBarrier<kThreads>(out_row + lo4 * 4, (hi4 - lo4) * 4, codes + lo4 * 4,
                                             scales + lo4 / 8,
                                             dq16_row != nullptr ? dq16_row + lo4 * 4 : nullptr);
  }
}

template <int kThreads>
__device__ __forceinline__ void NormalizeRow(const float* src, const float* __restrict__ weight,
                                             float* out_row, int64_t dim, float eps,
                                             bool round_bf16, uint8_t* codes = nullptr,
                                             uint8_t* scales = nullptr) {
  NormalizeRowColumns<kThreads>(src, weight, out_row, dim, 0, dim / 4, eps, round_bf16, codes,
                                scales);
}

template <int kThreads, bool kStaged>
__global__ void RmsNormKernel(const float* __restrict__ x, const float* __restrict__ weight,
                              float* out, int64_t dim, float eps, bool round_bf16, uint8_t* codes,
                              uint8_t* scales) {
  GridDependencyPrologue();
  extern __shared__ float4 staged[];
  const int64_t row = blockIdx.x;
  const float* xr = x + row * dim;
  if constexpr (kStaged) {
    const float4* in4 = reinterpret_cast<const float4*>(xr);
    for (int64_t i = threadIdx.x; i < dim / 4; i += kThreads) staged[i] = in4[i];
    __syncthreads();
  }
  NormalizeRow<kThreads>(kStaged ? reinterpret_cast<const float*>(staged) : xr, weight,
                         out + row * dim, dim, eps, round_bf16,
                         codes != nullptr ? codes + row * dim : nullptr,
                         codes != nullptr ? scales + row * (dim / 32) : nullptr);
}

}  // namespace weir::kernels::cuda

#endif  // WEIR_KERNELS_CUDA_RMS_NORM_CUH_
