#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <string>

#include "kernels/cuda/cp_async.cuh"
#include "kernels/cuda/dense/fp8_block_gemm_params.h"
#include "kernels/cuda/dense/fp8_mma_sm90.cuh"
#include "kernels/cuda/dense/tensor_core_sum_probe.h"
#include "kernels/cuda/grid_dependency.cuh"

namespace weir::kernels::cuda::dense {
namespace {

using fp8_gemm::AlignSharedTo1024;
using fp8_gemm::BlockSum;
using fp8_gemm::DescriptorOf;
using fp8_gemm::E4m3x2ToF16x2;
using fp8_gemm::F16A;
using fp8_gemm::F16B;
using fp8_gemm::FenceSharedForAsyncProxy;
using fp8_gemm::PinRegister;
using fp8_gemm::SwizzledKMajorDescriptorLo;
using fp8_gemm::Wgmma;
using fp8_gemm::WgmmaCommit;
using fp8_gemm::WgmmaF16;
using fp8_gemm::WgmmaFence;
using fp8_gemm::WgmmaWait;

// Two e4m3 codes (low byte first) as an f16x2 register (exact).
__device__ __forceinline__ uint32_t F16PairOf(const uint8_t* codes) {
  return E4m3x2ToF16x2(static_cast<uint32_t>(codes[0]) | (static_cast<uint32_t>(codes[1]) << 8));
}

__global__ void __launch_bounds__(128) TensorCoreSumProbeKernel(TensorCoreSumProbeParams p) {
  GridDependencyPrologue();
  // 1024-byte aligned tiles (the 128-byte swizzle's atoms): the launch adds
  // kWgmmaSmemSlack bytes and the base moves up.
  extern __shared__ __align__(128) uint8_t smem_raw[];
  uint8_t* const w8 = AlignSharedTo1024(smem_raw);        // [64][128] e4m3, swizzled rows
  uint8_t* const x8 = w8 + kProbeRows * kFp8GemmStageK;   // [8][128] e4m3
  uint8_t* const x16 = x8 + kProbeCols * kFp8GemmStageK;  // [8][128] f16 (K 0 .. 63)
  const int tid = static_cast<int>(threadIdx.x), lane = tid % 32, warp = tid / 32;
  const int64_t tile = blockIdx.x;
  const uint8_t* w = p.w + tile * kProbeRows * kProbeK;
  const uint8_t* x = p.x + tile * kProbeCols * kProbeK;
  // Zero the rings, then place the block at K 0 .. 31 of every row.
  for (int i = tid; i < kProbeRows * kFp8GemmStageK; i += 128) w8[i] = 0;
  for (int i = tid; i < kProbeCols * kFp8GemmStageK; i += 128) x8[i] = x16[i] = 0;
  __syncthreads();
  for (int i = tid; i < kProbeRows * kProbeK; i += 128) {
    const int r = i / kProbeK, k = i % kProbeK;
    w8[Fp8GemmSwizzledOffset(r, k / 16) + k % 16] = w[i];
  }
  for (int i = tid; i < kProbeCols * kProbeK; i += 128) {
    const int r = i / kProbeK, k = i % kProbeK;
    x8[Fp8GemmSwizzledOffset(r, k / 16) + k % 16] = x[i];
    const __half h = __ushort_as_half(
        static_cast<unsigned short>(E4m3x2ToF16x2(static_cast<uint32_t>(x[i])) & 0xFFFFu));
    *reinterpret_cast<__half*>(&x16[Fp8GemmSwizzledOffset(r, (2 * k) / 16) + (2 * k) % 16]) = h;
  }
  FenceSharedForAsyncProxy();
  __syncthreads();

  const int g = lane / 4, t = lane % 4;
  const int r0 = 16 * warp + g;
  // A fragments of the two K halves (mma.sync m16n8k16 row-major A).
  uint32_t a[2][4];
  for (int h = 0; h < 2; ++h) {
    const int c0 = 16 * h + 2 * t;
    a[h][0] = F16PairOf(w + r0 * kProbeK + c0);
    a[h][1] = F16PairOf(w + (r0 + 8) * kProbeK + c0);
    a[h][2] = F16PairOf(w + r0 * kProbeK + c0 + 8);
    a[h][3] = F16PairOf(w + (r0 + 8) * kProbeK + c0 + 8);
  }
  // mma: BlockSum's pair.
  F16A fa;
  F16B fb;
  for (int i = 0; i < 4; ++i) {
    fa.lo[i] = a[0][i];
    fa.hi[i] = a[1][i];
  }
  fb.lo[0] = F16PairOf(x + g * kProbeK + 2 * t);
  fb.lo[1] = F16PairOf(x + g * kProbeK + 2 * t + 8);
  fb.hi[0] = F16PairOf(x + g * kProbeK + 16 + 2 * t);
  fb.hi[1] = F16PairOf(x + g * kProbeK + 16 + 2 * t + 8);
  float mma[4];
  BlockSum(fa, fb, mma);

  // wgmma f16: the two halves, B from x16 (a K half is 32 bytes of a row).
  float d16[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  const uint32_t x16_lo = SwizzledKMajorDescriptorLo(SharedAddress(x16));
  WgmmaFence();
  WgmmaF16<8>::RS(a[0], DescriptorOf(x16_lo), d16, false);
  WgmmaF16<8>::RS(a[1], DescriptorOf(x16_lo + (32 >> 4)), d16, true);
  WgmmaCommit();
  WgmmaWait(0);
  for (int i = 0; i < 4; ++i) PinRegister(d16[i]);

  // wgmma e4m3: one K-32 block, both operands by descriptor.
  float d8[4];
  WgmmaFence();
  Wgmma<8>::SS(DescriptorOf(SwizzledKMajorDescriptorLo(SharedAddress(w8))),
               DescriptorOf(SwizzledKMajorDescriptorLo(SharedAddress(x8))), d8);
  WgmmaCommit();
  WgmmaWait(0);
  for (int i = 0; i < 4; ++i) PinRegister(d8[i]);

  // The same with imm-scale-a = -1.
  float dn[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  if (p.wgmma_e4m3_neg_a != nullptr) {
    WgmmaFence();
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %6, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3 "
        "{%0, %1, %2, %3}, %4, %5, p, -1, 1;\n}\n"
        : "=f"(dn[0]), "=f"(dn[1]), "=f"(dn[2]), "=f"(dn[3])
        : "l"(DescriptorOf(SwizzledKMajorDescriptorLo(SharedAddress(w8)))),
          "l"(DescriptorOf(SwizzledKMajorDescriptorLo(SharedAddress(x8)))), "r"(0)
        : "memory");
    WgmmaCommit();
    WgmmaWait(0);
    for (int i = 0; i < 4; ++i) PinRegister(dn[i]);
  }

  // Accumulator (row g / g + 8 of the warp's 16, X rows 2t, 2t + 1).
  float* out[4] = {p.mma, p.wgmma_f16, p.wgmma_e4m3, p.wgmma_e4m3_neg_a};
  const float* v[4] = {mma, d16, d8, dn};
  for (int o = 0; o < 4; ++o) {
    if (out[o] == nullptr) continue;
    float* y = out[o] + tile * kProbeRows * kProbeCols;
    y[r0 * kProbeCols + 2 * t] = v[o][0];
    y[r0 * kProbeCols + 2 * t + 1] = v[o][1];
    y[(r0 + 8) * kProbeCols + 2 * t] = v[o][2];
    y[(r0 + 8) * kProbeCols + 2 * t + 1] = v[o][3];
  }
}

}  // namespace

absl::Status TensorCoreSumProbe(const TensorCoreSumProbeParams& p) {
  if (p.w == nullptr || p.x == nullptr || p.mma == nullptr || p.wgmma_f16 == nullptr ||
      p.wgmma_e4m3 == nullptr || p.tiles < 1 || p.tiles > (int64_t{1} << 20)) {
    return absl::InvalidArgumentError(
        "TensorCoreSumProbe: needs every pointer and 1 .. 2^20 tiles");
  }
  int device = 0, major = 0, minor = 0;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
  if (major != 9 || minor != 0) {
    return absl::UnimplementedError("TensorCoreSumProbe: needs compute capability 9.0 (wgmma)");
  }
  constexpr size_t kSmem =
      (kProbeRows + 2 * kProbeCols) * kFp8GemmStageK + fp8_gemm::kWgmmaSmemSlack;
  TensorCoreSumProbeKernel<<<static_cast<unsigned>(p.tiles), 128, kSmem>>>(p);
  cudaError_t err = cudaGetLastError();
  if (err == cudaSuccess) err = cudaDeviceSynchronize();
  if (err != cudaSuccess) {
    return absl::InternalError(std::string("TensorCoreSumProbe: ") + cudaGetErrorString(err));
  }
  return absl::OkStatus();
}

}  // namespace weir::kernels::cuda::dense
