#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "kernels/cuda/dense/bf16_gemm_params.h"
#include "kernels/cuda/dense/bf16_gemm_sm90.cuh"
#include "kernels/cuda/dense/bf16_gemm_sm90.h"
#include "kernels/cuda/dense/sm90_gemm_launch.h"
#include "kernels/cuda/dense/split_reduce.cuh"
#include "kernels/cuda/launch_status.h"

namespace weir::kernels::cuda::dense {
namespace {

// Instantiates the kernel of one tile (values checked by DispatchGemmTile)
// and launches it.
template <int kBn, int kBm, int kWarpsN, int kWarpsM, int kStages>
absl::Status LaunchTile(const Bf16GemmParams& p, const Fp8GemmTileShape& shape,
                        cudaStream_t stream) {
  if constexpr (Fp8GemmTileIsWgmmaOnly(kBm, kWarpsM)) {
    return absl::InvalidArgumentError("Bf16Gemm: this tile runs Fp8BlockGemm's wgmma only");
  } else {
    const bf16_gemm::KernelArgs args{p.x,
                                     p.w,
                                     p.y,
                                     p.m,
                                     p.n,
                                     p.k,
                                     p.x_group_stride != 0 ? p.x_group_stride : p.m * p.k,
                                     p.w_group_stride != 0 ? p.w_group_stride : p.n * p.k,
                                     p.y_group_stride != 0 ? p.y_group_stride : p.m * p.n,
                                     p.output == Fp8GemmOutput::kBf16,
                                     p.output == Fp8GemmOutput::kF32RoundedBf16,
                                     p.k_splits,
                                     p.split_scratch};
    const dim3 grid(static_cast<unsigned>((p.n + kBn - 1) / kBn),
                    static_cast<unsigned>((p.m + kBm - 1) / kBm),
                    static_cast<unsigned>(p.groups * p.k_splits));
    const int threads = kWarpsN * kWarpsM * 32;
    const int smem = static_cast<int>(Bf16GemmSharedBytes(shape));
    auto kernel = bf16_gemm::Bf16GemmKernel<kBn, kBm, kWarpsN, kWarpsM, kStages>;
    if (absl::Status s = AllowSharedBytes(kernel, smem, "Bf16Gemm"); !s.ok()) return s;
    kernel<<<grid, threads, smem, stream>>>(args);
    if (p.k_splits > 1) {
      LaunchSplitReduce(p.split_scratch, p.y, p.m * p.n, p.groups, p.k_splits, args.y_stride,
                        args.bf16_out, args.round_f32, stream);
    }
    return LaunchStatus("Bf16Gemm");
  }
}

}  // namespace

absl::Status Bf16Gemm(const Bf16GemmParams& p, cudaStream_t stream) {
  return RunGemmTile(
      p, CheckBf16GemmParams(p), "Bf16Gemm",
      [&]<int kBn, int kBm, int kWarpsN, int kWarpsM, int kStages>(const Fp8GemmTileShape& shape) {
        return LaunchTile<kBn, kBm, kWarpsN, kWarpsM, kStages>(p, shape, stream);
      });
}

}  // namespace weir::kernels::cuda::dense
