#include <cuda_runtime.h>

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
  return {p.x,
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
          p.split_scratch};
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
    const int smem = static_cast<int>(Bf16GemmSharedBytes(shape));
    auto kernel = bf16_gemm::Bf16GemmKernel<kBn, kBm, kWarpsN, kWarpsM, kStages>;
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
                        args.bf16_out, args.round_f32, stream, p.n, args.ldy);
    }
    return LaunchStatus("Bf16Gemm");
  }
}

// kN128M128Ws (bf16_gemm_ws_sm90.cuh): one CTA of 384 threads a 128 x 128
// tile of Y^T; the operands as TMA tensor maps of bytes (a row is 2 k bytes).
absl::Status LaunchWs(const Bf16GemmParams& p, cudaStream_t stream) {
  bf16_gemm::WsArgs ws{};
  ws.plain = ArgsOf(p);
  ws.fold_splits = p.k_splits > 1;  // summed in the CTA, no second kernel
  const uint64_t row = static_cast<uint64_t>(p.k) * 2;
  if (absl::Status s = EncodeTmaRowsMap(&ws.w_map, p.w, row, p.n, p.groups, row,
                                        ws.plain.w_stride * 2, bf16_gemm::kWsBn);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = EncodeTmaRowsMap(&ws.x_map, p.x, row, p.m, p.groups, row,
                                        ws.plain.x_stride * 2, bf16_gemm::kWsBm);
      !s.ok()) {
    return s;
  }
  const dim3 grid(static_cast<unsigned>((p.n + bf16_gemm::kWsBn - 1) / bf16_gemm::kWsBn),
                  static_cast<unsigned>((p.m + bf16_gemm::kWsBm - 1) / bf16_gemm::kWsBm),
                  static_cast<unsigned>(p.groups));
  const int smem = bf16_gemm::kWsSharedBytes + fp8_gemm::kWgmmaSmemSlack;
  if (absl::Status s = AllowSharedBytes(bf16_gemm::Bf16GemmWsKernel, smem, "Bf16Gemm"); !s.ok()) {
    return s;
  }
  bf16_gemm::Bf16GemmWsKernel<<<grid, bf16_gemm::kWsThreads, smem, stream>>>(ws);
  return LaunchStatus("Bf16Gemm");
}

}  // namespace

absl::Status Bf16Gemm(const Bf16GemmParams& p, cudaStream_t stream) {
  if (ResolveBf16GemmTile(p) == Fp8GemmTile::kN128M128Ws) {
    if (absl::Status s = CheckBf16GemmParams(p); !s.ok()) return s;
    if (absl::Status s = CheckSm90Device("Bf16Gemm"); !s.ok()) return s;
    return LaunchWs(p, stream);
  }
  return RunGemmTile(
      p, CheckBf16GemmParams(p), "Bf16Gemm",
      [&]<int kBn, int kBm, int kWarpsN, int kWarpsM, int kStages>(const Fp8GemmTileShape& shape) {
        return LaunchTile<kBn, kBm, kWarpsN, kWarpsM, kStages>(p, shape, stream);
      });
}

}  // namespace weir::kernels::cuda::dense
