#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "kernels/cuda/dense/bf16_gemm_params.h"
#include "kernels/cuda/dense/bf16_gemm_sm90.cuh"
#include "kernels/cuda/dense/bf16_gemm_sm90.h"
#include "kernels/cuda/dense/bf16_gemm_ws_sm90.cuh"
#include "kernels/cuda/dense/sm90_gemm_launch.h"
#include "kernels/cuda/dense/split_reduce.cuh"
#include "kernels/cuda/launch_status.h"
#include "kernels/cuda/tma.cuh"

namespace weir::kernels::cuda::dense {
namespace {

// The kernels' arguments of `p` (group strides resolved: 0 means packed).
bf16_gemm::KernelArgs ArgsOf(const Bf16GemmParams& p) {
  const int64_t ldy = p.y_row_stride != 0 ? p.y_row_stride : p.n;
  return {
      p.x,
      p.w,
      p.y,
      p.m,
      p.n,
      p.k,
      p.x_group_stride != 0 ? p.x_group_stride : p.m * p.k,
      p.w_group_stride != 0 ? p.w_group_stride : p.n * p.k,
      p.y_group_stride != 0 ? p.y_group_stride : p.m * ldy,
      ldy,
      p.output == Fp8GemmOutput::kBf16,
      p.output == Fp8GemmOutput::kF32RoundedBf16,
      p.k_splits,
      p.split_scratch,
      p.w_codes,
      p.w_scales,
      p.w_scales_group_stride != 0 ? p.w_scales_group_stride : Bf16GemmWeightScaleBytes(p.n, p.k),
      p.row_role,
      p.role};
}

// Fp8WeightBf16: a thread a chunk of 8 codes (one 8-byte load, one scale
// byte, one 16-byte store); grid.y = group.
__global__ void Fp8WeightBf16Kernel(const uint8_t* __restrict__ codes,
                                    const uint8_t* __restrict__ scales, uint16_t* __restrict__ out,
                                    int64_t rows, int64_t cols, int64_t code_stride,
                                    int64_t scale_stride) {
  GridDependencyPrologue();
  const int64_t chunk = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t chunks = rows * cols / 8;
  if (chunk >= chunks) return;
  const int64_t g = blockIdx.y;
  const int64_t r = chunk / (cols / 8), c = chunk % (cols / 8) * 8;
  const uint2 w = *reinterpret_cast<const uint2*>(codes + g * code_stride + r * cols + c);
  uint32_t v[4];
  fp8_gemm::Fp8ToBf16Eight(w.x, w.y, scales[g * scale_stride + (r / 32) * (cols / 32) + c / 32], v);
  *reinterpret_cast<uint4*>(out + (g * rows + r) * cols + c) = make_uint4(v[0], v[1], v[2], v[3]);
}

// Instantiates the kernel of one tile (values checked by DispatchGemmTile)
// and launches it.
template <int kBn, int kBm, int kWarpsN, int kWarpsM, int kStages>
absl::Status LaunchTile(const Bf16GemmParams& p, const Fp8GemmTileShape& shape,
                        cudaStream_t stream) {
  if constexpr (Fp8GemmTileIsWgmmaOnly(kBm, kWarpsM)) {
    return absl::InvalidArgumentError("Bf16Gemm: this tile runs Fp8BlockGemm's wgmma only");
  } else {
    const bf16_gemm::KernelArgs args = ArgsOf(p);
    const dim3 grid(static_cast<unsigned>((p.n + kBn - 1) / kBn),
                    static_cast<unsigned>((p.m + kBm - 1) / kBm),
                    static_cast<unsigned>(p.groups * p.k_splits));
    const int threads = kWarpsN * kWarpsM * 32;
    const bool w8 = p.w_codes != nullptr;
    // With w_codes, a CTA's scale bytes after its rings (the kernel's
    // scale_tile): its W row tiles x two K blocks a stage of its split.
    const int64_t all_kt = (p.k + kBf16GemmStageK - 1) / kBf16GemmStageK;
    const int64_t scale_bytes =
        w8 ? std::max(1, kBn / 32) * 2 * ((all_kt + p.k_splits - 1) / p.k_splits) : 0;
    const int smem = static_cast<int>(Bf16GemmSharedBytes(shape, w8) + scale_bytes);
    auto kernel = w8 ? bf16_gemm::Bf16GemmKernel<kBn, kBm, kWarpsN, kWarpsM, kStages, true>
                     : bf16_gemm::Bf16GemmKernel<kBn, kBm, kWarpsN, kWarpsM, kStages, false>;
    if (absl::Status s = AllowSharedBytes(kernel, smem, "Bf16Gemm"); !s.ok()) return s;
    kernel<<<grid, threads, smem, stream>>>(args);
    if (p.k_splits > 1 && p.y_codes != nullptr) {  // y and its FP8 form
      constexpr int kReduceThreads = 256;
      const int64_t mn = p.m * p.n;
      SplitReduceFp8Kernel<<<dim3(static_cast<unsigned>((mn + kReduceThreads - 1) / kReduceThreads),
                                  static_cast<unsigned>(p.groups)),
                             kReduceThreads, 0, stream>>>(
          p.split_scratch, static_cast<float*>(p.y), mn, p.k_splits, args.y_stride, args.round_f32,
          p.n, args.ldy, p.y_codes, p.y_scales);
    } else if (p.k_splits > 1) {
      LaunchSplitReduce(p.split_scratch, p.y, p.m * p.n, p.groups, p.k_splits, args.y_stride,
                        args.bf16_out, args.round_f32, p.n, args.ldy, p.row_role, p.role, stream);
    }
    return LaunchStatus("Bf16Gemm");
  }
}

// kN128M128Ws (bf16_gemm_ws_sm90.cuh): one CTA of 384 threads a 128 x 128
// tile of Y^T (ws_m256: 128 x 256); the operands as TMA tensor maps of bytes
// (a row is 2 k bytes).
template <bool kWide>
absl::Status LaunchWs(const Bf16GemmParams& p, cudaStream_t stream) {
  using Shape = bf16_gemm::WsShape<kWide>;
  bf16_gemm::WsArgs ws{};
  ws.plain = ArgsOf(p);
  ws.fold_splits = p.k_splits > 1;  // summed in the CTA, no second kernel
  ws.persistent = p.ws_persistent;
  ws.groups = p.groups;
  const uint64_t row = static_cast<uint64_t>(p.k) * 2;
  if (absl::Status s = EncodeTmaRowsMap(&ws.w_map, p.w, row, p.n, p.groups, row,
                                        ws.plain.w_stride * 2, bf16_gemm::kWsBn);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = EncodeTmaRowsMap(&ws.x_map, p.x, row, p.m, p.groups, row,
                                        ws.plain.x_stride * 2, Shape::kBm);
      !s.ok()) {
    return s;
  }
  dim3 grid(static_cast<unsigned>((p.n + bf16_gemm::kWsBn - 1) / bf16_gemm::kWsBn),
            static_cast<unsigned>((p.m + Shape::kBm - 1) / Shape::kBm),
            static_cast<unsigned>(p.groups));
  if (p.ws_persistent) {  // one CTA an SM at most, each taking tiles in turn
    int device = 0, sms = 0;
    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess ||
        sms <= 0) {
      cudaGetLastError();
      return absl::InternalError("Bf16Gemm: the device's SM count is unknown");
    }
    const int64_t tiles = int64_t{grid.x} * grid.y * grid.z;
    grid = dim3(static_cast<unsigned>(std::min<int64_t>(tiles, sms)), 1, 1);
  }
  const int smem = Shape::kSharedBytes + fp8_gemm::kWgmmaSmemSlack;
  auto kernel = ws.fold_splits && ws.plain.k_splits > 1 ? bf16_gemm::Bf16GemmWsKernel<kWide, true>
                                                        : bf16_gemm::Bf16GemmWsKernel<kWide, false>;
  if (absl::Status s = AllowSharedBytes(kernel, smem, "Bf16Gemm"); !s.ok()) return s;
  kernel<<<grid, bf16_gemm::kWsThreads, smem, stream>>>(ws);
  return LaunchStatus("Bf16Gemm");
}

}  // namespace

absl::Status Fp8WeightBf16(const Fp8WeightBf16Params& p, cudaStream_t stream) {
  if (p.codes == nullptr || p.scales == nullptr || p.out == nullptr || p.rows <= 0 || p.cols <= 0 ||
      p.cols % 32 != 0 || p.groups <= 0 || p.groups > 65535 ||
      reinterpret_cast<uintptr_t>(p.codes) % 8 != 0 ||
      reinterpret_cast<uintptr_t>(p.out) % 16 != 0 || p.code_group_stride < 0 ||
      p.code_group_stride % 8 != 0 || p.scale_group_stride < 0 ||
      (p.groups > 1 && ((p.code_group_stride != 0 && p.code_group_stride < p.rows * p.cols) ||
                        (p.scale_group_stride != 0 &&
                         p.scale_group_stride < Bf16GemmWeightScaleBytes(p.rows, p.cols))))) {
    return absl::InvalidArgumentError(
        "Fp8WeightBf16: needs codes, scales and out, rows > 0, cols a positive multiple of 32, "
        "groups in [1, 65535], codes 8-byte and out 16-byte aligned, group strides of at "
        "least a group (codes a multiple of 8)");
  }
  constexpr int kThreads = 256;
  const int64_t chunks = p.rows * p.cols / 8;
  Fp8WeightBf16Kernel<<<dim3(static_cast<unsigned>((chunks + kThreads - 1) / kThreads),
                             static_cast<unsigned>(p.groups)),
                        kThreads, 0, stream>>>(
      p.codes, p.scales, p.out, p.rows, p.cols,
      p.code_group_stride != 0 ? p.code_group_stride : p.rows * p.cols,
      p.scale_group_stride != 0 ? p.scale_group_stride : Bf16GemmWeightScaleBytes(p.rows, p.cols));
  return LaunchStatus("Fp8WeightBf16");
}

absl::Status Bf16Gemm(const Bf16GemmParams& p, cudaStream_t stream) {
  if (ResolveBf16GemmTile(p) == Fp8GemmTile::kN128M128Ws) {
    if (absl::Status s = CheckBf16GemmParams(p); !s.ok()) return s;
    if (absl::Status s = CheckSm90Device("Bf16Gemm"); !s.ok()) return s;
    return p.ws_m256 ? LaunchWs<true>(p, stream) : LaunchWs<false>(p, stream);
  }
  return RunGemmTile(
      p, CheckBf16GemmParams(p), "Bf16Gemm",
      [&]<int kBn, int kBm, int kWarpsN, int kWarpsM, int kStages>(const Fp8GemmTileShape& shape) {
        return LaunchTile<kBn, kBm, kWarpsN, kWarpsM, kStages>(p, shape, stream);
      });
}

}  // namespace weir::kernels::cuda::dense
