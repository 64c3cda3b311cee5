// kernels/cuda/decode/kv_rows.cuh — device code of KvRowFinish. No host
// dependencies. Every step calls the device code of the launch it replaces
// (rms_norm.cuh, rope_pair.cuh, dense/fake_quant.cuh, dense/act_quant_fp8.cuh),
// so a fused row has those launches' bits.
#ifndef WEIR_KERNELS_CUDA_DECODE_KV_ROWS_CUH_
#define WEIR_KERNELS_CUDA_DECODE_KV_ROWS_CUH_

#include <cstdint>

#include "kernels/cuda/dense/act_quant_fp8.cuh"
#include "kernels/cuda/dense/fake_quant.cuh"
#include "kernels/cuda/grid_dependency.cuh"
#include "kernels/cuda/rms_norm.cuh"
#include "kernels/cuda/rope_pair.cuh"
#include "kernels/cuda/rounding.cuh"

namespace weir::kernels::cuda::decode {

// The store of a finished row (KvRowStore without kNone; see kv_rows.h).
enum class DeviceKvStore {
  kNone,
  kFloatFp8,
  kFloatMxfp4,
  kFloatNvfp4,
  kCodesFp8,
  kCodesMxfp4,
  kCodesNvfp4
};

// FakeQuant of the staged row into `dst` (FakeQuantKernel's per-element
// work: thread i % kThreads takes element i, so a block of kBlock elements
// lies in consecutive lanes of one warp, as there).
template <int kThreads, dense::DeviceFakeQuantFormat kFormat, int kBlock>
__device__ __forceinline__ void StoreFakeQuantRow(const float* row, int64_t dim, float* dst) {
  for (int64_t i = threadIdx.x; i < dim; i += kThreads) {  // whole warps a pass: dim % 32 == 0
    const float v = row[i];
    float amax;
    int nonfinite;
    dense::BlockAmax<kBlock>(v, amax, nonfinite);
    dst[i] = dense::FakeQuantValue<kFormat>(v, amax, nonfinite);
  }
}

// QuantizeFp4Kernel's work over the staged row: codes (two a byte, the even
// element low) and one scale code a kBlock.
template <int kThreads, bool kE8m0, int kBlock>
__device__ __forceinline__ void StoreFp4Row(const float* row, int64_t dim, uint8_t* codes,
                                            uint8_t* scales) {
  for (int64_t i = threadIdx.x; i < dim; i += kThreads) {
    const float v = row[i];
    float amax;
    int nonfinite;
    dense::BlockAmax<kBlock>(v, amax, nonfinite);
    uint32_t scale_code;
    const uint32_t code = dense::Fp4StoredCode<kE8m0>(v, amax, nonfinite, &scale_code);
    const uint32_t high = __shfl_down_sync(0xffffffffu, code, 1);
    if (i % 2 == 0) codes[i / 2] = static_cast<uint8_t>(code | (high << 4));
    if (i % kBlock == 0) scales[i / kBlock] = static_cast<uint8_t>(scale_code);
  }
}

// One CTA a row, the row staged in dim floats of dynamic shared memory:
// RmsNorm (NormalizeRow, in place), the RoPE of its last rope_dim elements,
// `out`, then the store at the row's pool row.
template <int kThreads, DeviceKvStore kStore>
__global__ void __launch_bounds__(kThreads)
    KvRowFinishKernel(const float* __restrict__ x, const float* __restrict__ weight, float eps,
                      bool round_bf16, const int64_t* __restrict__ positions,
                      const float* __restrict__ cos_sin, int64_t cos_sin_rows, int rope_dim,
                      float* out, bool rope_out, const int32_t* __restrict__ dst_rows,
                      int64_t pool_rows, float* __restrict__ pool, uint8_t* __restrict__ codes,
                      uint8_t* __restrict__ scales, int64_t dim) {
  GridDependencyPrologue();
  extern __shared__ float4 staged4[];
  float* row = reinterpret_cast<float*>(staged4);
  const int64_t r = blockIdx.x;
  const float4* in4 = reinterpret_cast<const float4*>(x + r * dim);
  for (int64_t i = threadIdx.x; i < dim / 4; i += kThreads) staged4[i] = in4[i];
  __syncthreads();
  NormalizeRow<kThreads>(row, weight, row, dim, eps, round_bf16);
  float4* out4 = out != nullptr ? reinterpret_cast<float4*>(out + r * dim) : nullptr;
  if (out4 != nullptr && !rope_out) {  // each thread its own float4s: no barrier needed
    for (int64_t i = threadIdx.x; i < dim / 4; i += kThreads) out4[i] = staged4[i];
  }
  if (positions != nullptr) {
    __syncthreads();  // the pairs cross the threads' float4s
    const int half = rope_dim / 2;
    const int64_t position = positions[r];
    float* rot = row + (dim - rope_dim);
    for (int pair = threadIdx.x; pair < half; pair += kThreads) {
      const float2 cs = RopeCosSinAt(cos_sin, cos_sin_rows, position, half, pair);
      const float2 v = RopeRotatePair(rot[2 * pair], rot[2 * pair + 1], cs.x, cs.y, false);
      rot[2 * pair] = round_bf16 ? RoundToBf16(v.x) : v.x;
      rot[2 * pair + 1] = round_bf16 ? RoundToBf16(v.y) : v.y;
    }
  }
  __syncthreads();
  if (out4 != nullptr && rope_out) {
    for (int64_t i = threadIdx.x; i < dim / 4; i += kThreads) out4[i] = staged4[i];
  }
  if constexpr (kStore == DeviceKvStore::kNone) return;
  const int64_t dst = dst_rows != nullptr ? dst_rows[r] : r;  // uniform over the CTA
  if (dst < 0 || (pool_rows > 0 && dst >= pool_rows)) return;
  using Fmt = dense::DeviceFakeQuantFormat;
  if constexpr (kStore == DeviceKvStore::kFloatFp8) {
    StoreFakeQuantRow<kThreads, Fmt::kFp8, 32>(row, dim, pool + dst * dim);
  } else if constexpr (kStore == DeviceKvStore::kFloatMxfp4) {
    StoreFakeQuantRow<kThreads, Fmt::kMxfp4, 32>(row, dim, pool + dst * dim);
  } else if constexpr (kStore == DeviceKvStore::kFloatNvfp4) {
    StoreFakeQuantRow<kThreads, Fmt::kNvfp4Kv, 16>(row, dim, pool + dst * dim);
  } else if constexpr (kStore == DeviceKvStore::kCodesFp8) {
    dense::ActQuantRowAfterBarrier<kThreads>(row, dim, codes + dst * dim,
                                             scales + dst * (dim / 32));
  } else if constexpr (kStore == DeviceKvStore::kCodesMxfp4) {
    StoreFp4Row<kThreads, true, 32>(row, dim, codes + dst * (dim / 2), scales + dst * (dim / 32));
  } else if constexpr (kStore == DeviceKvStore::kCodesNvfp4) {
    StoreFp4Row<kThreads, false, 16>(row, dim, codes + dst * (dim / 2), scales + dst * (dim / 16));
  }
}

}  // namespace weir::kernels::cuda::decode

#endif  // WEIR_KERNELS_CUDA_DECODE_KV_ROWS_CUH_
