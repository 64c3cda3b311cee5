#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "kernels/cuda/dense/fp8_block_gemm_params.h"
#include "kernels/cuda/dense/fp8_block_gemm_sm90.cuh"
#include "kernels/cuda/dense/fp8_block_gemm_sm90.h"
#include "kernels/cuda/launch_status.h"

namespace weir::kernels::cuda::dense {
namespace {

// Instantiates the kernel of one tile (values from ShapeOfFp8GemmTile) and
// launches it; the shape is checked against the table so the two cannot drift.
template <int kBn, int kBm, int kWarpsN, int kWarpsM, int kStages>
absl::Status LaunchTile(const Fp8BlockGemmParams& p, const Fp8GemmTileShape& shape,
                        cudaStream_t stream) {
  if (shape.block_n != kBn || shape.block_m != kBm || shape.warps_n != kWarpsN ||
      shape.warps_m != kWarpsM || shape.stages != kStages) {
    return absl::InternalError("Fp8BlockGemm: tile table and instances disagree");
  }
  const int64_t n_groups = (p.n + 31) / 32;
  const fp8_gemm::KernelArgs args{p.x,
                                  p.x_scales,
                                  p.w,
                                  p.w_scales,
                                  p.y,
                                  p.m,
                                  p.n,
                                  p.k,
                                  p.output == Fp8GemmOutput::kBf16,
                                  p.x_group_stride != 0 ? p.x_group_stride : p.m * p.k,
                                  p.x_scales_group_stride != 0 ? p.x_scales_group_stride
                                                               : p.m * (p.k / 32),
                                  p.w_group_stride != 0 ? p.w_group_stride : p.n * p.k,
                                  p.w_scales_group_stride != 0 ? p.w_scales_group_stride
                                                               : n_groups * (p.k / 32),
                                  p.y_group_stride != 0 ? p.y_group_stride : p.m * p.n};
  const dim3 grid(static_cast<unsigned>((p.n + kBn - 1) / kBn),
                  static_cast<unsigned>((p.m + kBm - 1) / kBm), static_cast<unsigned>(p.groups));
  const int threads = kWarpsN * kWarpsM * 32;
  const int smem = static_cast<int>(Fp8GemmSharedBytes(shape));
  auto launch = [&](auto kernel) -> absl::Status {
    // A host-side attribute, legal during stream capture; cheap to repeat.
    if (cudaError_t err =
            cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
        err != cudaSuccess) {
      return absl::InternalError(std::string("Fp8BlockGemm: shared memory attribute: ") +
                                 cudaGetErrorString(err));
    }
    kernel<<<grid, threads, smem, stream>>>(args);
    return LaunchStatus("Fp8BlockGemm");
  };
  // Both scale paths run the same arithmetic (same bits); they differ in speed.
  const bool async_scales = p.k % kFp8GemmStageK == 0 &&
                            reinterpret_cast<uintptr_t>(p.x_scales) % 4 == 0 &&
                            reinterpret_cast<uintptr_t>(p.w_scales) % 4 == 0 &&
                            (p.groups == 1 || (args.xs_stride % 4 == 0 && args.ws_stride % 4 == 0));
  if (async_scales) {
    return launch(fp8_gemm::Fp8BlockGemmKernel<kBn, kBm, kWarpsN, kWarpsM, kStages, true>);
  }
  return launch(fp8_gemm::Fp8BlockGemmKernel<kBn, kBm, kWarpsN, kWarpsM, kStages, false>);
}

absl::Status CheckDevice() {
  int device = 0, major = 0;
  if (cudaError_t err = cudaGetDevice(&device); err != cudaSuccess) {
    return absl::InternalError(std::string("Fp8BlockGemm: cudaGetDevice: ") +
                               cudaGetErrorString(err));
  }
  if (cudaError_t err = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
      err != cudaSuccess) {
    return absl::InternalError(std::string("Fp8BlockGemm: device attribute: ") +
                               cudaGetErrorString(err));
  }
  if (major != 9) {
    return absl::UnimplementedError("Fp8BlockGemm: built for sm_90a only");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Fp8BlockGemm(const Fp8BlockGemmParams& p, cudaStream_t stream) {
  if (absl::Status s = CheckFp8BlockGemmParams(p); !s.ok()) return s;
  if (absl::Status s = CheckDevice(); !s.ok()) return s;
  const Fp8GemmTile tile = p.tile == Fp8GemmTile::kAuto ? ChooseFp8GemmTile(p.m, p.n) : p.tile;
  const Fp8GemmTileShape shape = ShapeOfFp8GemmTile(tile);
  switch (tile) {
    case Fp8GemmTile::kN16M8:
      return LaunchTile<16, 8, 1, 1, 6>(p, shape, stream);
    case Fp8GemmTile::kN16M16:
      return LaunchTile<16, 16, 1, 1, 6>(p, shape, stream);
    case Fp8GemmTile::kN16M32:
      return LaunchTile<16, 32, 1, 1, 5>(p, shape, stream);
    case Fp8GemmTile::kN16M64:
      return LaunchTile<16, 64, 1, 1, 4>(p, shape, stream);
    case Fp8GemmTile::kN32M8:
      return LaunchTile<32, 8, 2, 1, 6>(p, shape, stream);
    case Fp8GemmTile::kN32M16:
      return LaunchTile<32, 16, 2, 1, 6>(p, shape, stream);
    case Fp8GemmTile::kN32M32:
      return LaunchTile<32, 32, 2, 1, 5>(p, shape, stream);
    case Fp8GemmTile::kN32M64:
      return LaunchTile<32, 64, 2, 1, 4>(p, shape, stream);
    case Fp8GemmTile::kN64M64:
      return LaunchTile<64, 64, 4, 1, 6>(p, shape, stream);
    case Fp8GemmTile::kN128M64:
      return LaunchTile<128, 64, 8, 1, 4>(p, shape, stream);
    case Fp8GemmTile::kN128M128:
      return LaunchTile<128, 128, 2, 4, 4>(p, shape, stream);
    case Fp8GemmTile::kAuto:
      break;
  }
  return absl::InvalidArgumentError("Fp8BlockGemm: unknown tile");
}

}  // namespace weir::kernels::cuda::dense
