// kernels/cuda/dense/fake_quant.cuh — device code of FakeQuant. No host
// dependencies. Each conversion mirrors kernels/common/numeric_formats.h.
#ifndef WEIR_KERNELS_CUDA_DENSE_FAKE_QUANT_CUH_
#define WEIR_KERNELS_CUDA_DENSE_FAKE_QUANT_CUH_

#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "kernels/cuda/grid_dependency.cuh"
#include "kernels/cuda/rounding.cuh"

namespace weir::kernels::cuda::dense {

// Value of the e2m1 nearest to `v`, |v| <= 6, ties to the even code
// (FloatToE2m1 then E2m1ToFloat): 0 .5 1 1.5 2 3 4 6 with the sign of v
// (-0 stays -0). Midpoints 0.25, 1.25, 2.5 and 5 go down, 0.75, 1.75, 3.5 up.
__device__ __forceinline__ float RoundToE2m1(float v) {
  const float a = fabsf(v);
  float q;
  if (a <= 0.25f) {
    q = 0.0f;
  } else if (a < 0.75f) {
    q = 0.5f;
  } else if (a <= 1.25f) {
    q = 1.0f;
  } else if (a < 1.75f) {
    q = 1.5f;
  } else if (a <= 2.5f) {
    q = 2.0f;
  } else if (a < 3.5f) {
    q = 3.0f;
  } else if (a <= 5.0f) {
    q = 4.0f;
  } else {
    q = 6.0f;
  }
  return copysignf(q, v);
}

enum class DeviceFakeQuantFormat { kFp8, kMxfp4, kNvfp4Kv };

// amax = max |v| over the kBlock consecutive lanes of this lane's block
// (kBlock divides 32; every lane of the warp calls it), nonfinite = 1 when
// any of them is NaN or infinite: the block statistics FakeQuantKernel and
// the stored-form quantizers (fake_quant.cu) scale by.
template <int kBlock>
__device__ __forceinline__ void BlockAmax(float v, float& amax, int& nonfinite) {
  amax = fabsf(v);
  nonfinite = isfinite(v) ? 0 : 1;
#pragma unroll
  for (int offset = kBlock / 2; offset > 0; offset /= 2) {
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, offset));
    nonfinite |= __shfl_xor_sync(0xffffffffu, nonfinite, offset);
  }
}

// The value FakeQuant gives v in a block whose statistics (BlockAmax) are
// amax and nonfinite: the one copy of that arithmetic, shared by
// FakeQuantKernel and the kernels that fake-quantize a row they made
// (decode/kv_rows.cuh).
template <DeviceFakeQuantFormat kFormat>
__device__ __forceinline__ float FakeQuantValue(float v, float amax, int nonfinite);

// One thread per element; the kBlock lanes of a block are consecutive lanes
// of one warp (kBlock divides 32), so the amax is a shuffle reduction inside
// the block's lanes. n is a multiple of kBlock.
template <DeviceFakeQuantFormat kFormat, int kBlock>
__global__ void FakeQuantKernel(const float* x, float* out, int64_t n) {
  GridDependencyPrologue();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const bool active = i < n;
  const float v = active ? x[i] : 0.0f;
  float amax;
  int nonfinite;
  BlockAmax<kBlock>(v, amax, nonfinite);
  if (!active) return;
  out[i] = FakeQuantValue<kFormat>(v, amax, nonfinite);
}

template <DeviceFakeQuantFormat kFormat>
__device__ __forceinline__ float FakeQuantValue(float v, float amax, int nonfinite) {
  if (nonfinite) return __uint_as_float(0x7FC00000u);
  if constexpr (kFormat == DeviceFakeQuantFormat::kFp8) {
    const float inv448 = static_cast<float>(1.0 / 448.0);
    const float s = E8m0ToFloat(Ue8m0CeilCode(__fmul_rn(fmaxf(amax, 1e-4f), inv448)));
    const float q = fminf(fmaxf(__fdiv_rn(v, s), -448.0f), 448.0f);
    return __fmul_rn(E4m3ToFloat(FloatToE4m3(q)), s);
  } else {
    float s;
    if constexpr (kFormat == DeviceFakeQuantFormat::kMxfp4) {
      const float inv6 = static_cast<float>(1.0 / 6.0);
      const float floor = 6.0f * 0x1p-126f;
      s = E8m0ToFloat(Ue8m0CeilCode(__fmul_rn(fmaxf(amax, floor), inv6)));
    } else {
      const float floor = 6.0f * 0x1p-9f;
      s = E4m3ToFloat(FloatToE4m3(__fdiv_rn(fmaxf(amax, floor), 6.0f)));
    }
    const float q = fminf(fmaxf(__fdiv_rn(v, s), -6.0f), 6.0f);
    return __fmul_rn(RoundToE2m1(q), s);
  }
}

// The e2m1 code (bit 3 = sign, from the sign bit of v) of RoundToE2m1(v).
__device__ __forceinline__ uint32_t E2m1Code(float v) {
  const float a = fabsf(v);
  uint32_t m;
  if (a <= 0.25f) {
    m = 0;
  } else if (a < 0.75f) {
    m = 1;
  } else if (a <= 1.25f) {
    m = 2;
  } else if (a < 1.75f) {
    m = 3;
  } else if (a <= 2.5f) {
    m = 4;
  } else if (a < 3.5f) {
    m = 5;
  } else if (a <= 5.0f) {
    m = 6;
  } else {
    m = 7;
  }
  return m | (signbit(v) ? 8u : 0u);
}

// The stored FP4 form of v in its block (QuantizeNvfp4Kv: kE8m0 false,
// e4m3 scales per 16; QuantizeMxfp4: kE8m0 true, E8M0 scales per 32): sets
// *scale_code to the block's scale code and returns v's e2m1 code (bit 3 =
// sign). The scale and the clamped quotient are FakeQuantValue's, so the
// codes decode to its values; a non-finite block gets the NaN scale (0xFF
// E8M0, 0x7F e4m3) and zero codes. The one copy of that arithmetic, shared by
// QuantizeFp4Kernel (fake_quant.cu) and decode/kv_rows.cuh.
template <bool kE8m0>
__device__ __forceinline__ uint32_t Fp4StoredCode(float v, float amax, int nonfinite,
                                                  uint32_t* scale_code) {
  float s;
  if constexpr (kE8m0) {
    const float inv6 = static_cast<float>(1.0 / 6.0);
    const float floor = 6.0f * 0x1p-126f;
    *scale_code = nonfinite ? 0xFFu : Ue8m0CeilCode(__fmul_rn(fmaxf(amax, floor), inv6));
    s = E8m0ToFloat(*scale_code);
  } else {
    const float floor = 6.0f * 0x1p-9f;
    *scale_code = nonfinite ? 0x7Fu : FloatToE4m3(__fdiv_rn(fmaxf(amax, floor), 6.0f));
    s = E4m3ToFloat(static_cast<uint8_t>(*scale_code));
  }
  return nonfinite ? 0u : E2m1Code(fminf(fmaxf(__fdiv_rn(v, s), -6.0f), 6.0f));
}

}  // namespace weir::kernels::cuda::dense

#endif  // WEIR_KERNELS_CUDA_DENSE_FAKE_QUANT_CUH_
