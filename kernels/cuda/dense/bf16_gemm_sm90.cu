#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "kernels/cuda/dense/bf16_gemm_params.h"
#include "kernels/cuda/dense/bf16_gemm_sm90.cuh"
#include "kernels/cuda/dense/bf16_gemm_sm90.h"
#include "kernels/cuda/launch_status.h"

namespace weir::kernels::cuda::dense {
namespace {

template <int kBn, int kBm, int kWarpsN, int kWarpsM, int kStages>
absl::Status LaunchTile(const Bf16GemmParams& p, const Fp8GemmTileShape& shape,
                        cudaStream_t stream) {
  if (shape.block_n != kBn || shape.block_m != kBm || shape.warps_n != kWarpsN ||
      shape.warps_m != kWarpsM || shape.stages != kStages) {
    return absl::InternalError("Bf16Gemm: tile table and instances disagree");
  }
  const bf16_gemm::KernelArgs args{
      p.x,
      p.w,
      p.y,
      p.m,
      p.n,
      p.k,
      p.x_group_stride != 0 ? p.x_group_stride : p.m * p.k,
      p.w_group_stride != 0 ? p.w_group_stride : p.n * p.k,
      p.y_group_stride != 0 ? p.y_group_stride : p.m * p.n,
      p.output == Fp8GemmOutput::kBf16};
  const dim3 grid(static_cast<unsigned>((p.n + kBn - 1) / kBn),
                  static_cast<unsigned>((p.m + kBm - 1) / kBm), static_cast<unsigned>(p.groups));
  const int threads = kWarpsN * kWarpsM * 32;
  const int smem = static_cast<int>(Bf16GemmSharedBytes(shape));
  auto kernel = bf16_gemm::Bf16GemmKernel<kBn, kBm, kWarpsN, kWarpsM, kStages>;
  if (cudaError_t err =
          cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
      err != cudaSuccess) {
    return absl::InternalError(std::string("Bf16Gemm: shared memory attribute: ") +
                               cudaGetErrorString(err));
  }
  kernel<<<grid, threads, smem, stream>>>(args);
  return LaunchStatus("Bf16Gemm");
}

absl::Status CheckDevice() {
  int device = 0, major = 0;
  if (cudaError_t err = cudaGetDevice(&device); err != cudaSuccess) {
    return absl::InternalError(std::string("Bf16Gemm: cudaGetDevice: ") +
                               cudaGetErrorString(err));
  }
  if (cudaError_t err = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
      err != cudaSuccess) {
    return absl::InternalError(std::string("Bf16Gemm: device attribute: ") +
                               cudaGetErrorString(err));
  }
  if (major != 9) return absl::UnimplementedError("Bf16Gemm: built for sm_90a only");
  return absl::OkStatus();
}

}  // namespace

absl::Status Bf16Gemm(const Bf16GemmParams& p, cudaStream_t stream) {
  if (absl::Status s = CheckBf16GemmParams(p); !s.ok()) return s;
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
  return absl::InvalidArgumentError("Bf16Gemm: unknown tile");
}

}  // namespace weir::kernels::cuda::dense
