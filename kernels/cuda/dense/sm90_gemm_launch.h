// kernels/cuda/dense/sm90_gemm_launch.h
//
// Host helpers shared by the launchers of the mma.sync GEMMs built for
// sm_90a (Fp8BlockGemm, Bf16Gemm): the device check and the dispatch of a
// tile of fp8_block_gemm_params.h to the kernel instance compiled for it.
// Included by .cu files only (CUDA runtime).
//
// Thread safety: stateless.

#ifndef WEIR_KERNELS_CUDA_DENSE_SM90_GEMM_LAUNCH_H_
#define WEIR_KERNELS_CUDA_DENSE_SM90_GEMM_LAUNCH_H_

#include <cuda_runtime.h>

#include <string>

#include "absl/status/status.h"
#include "kernels/cuda/dense/fp8_block_gemm_params.h"

namespace weir::kernels::cuda::dense {

// OK on a compute capability 9.x device; UNIMPLEMENTED elsewhere (the
// kernels are built for sm_90a only); INTERNAL on a CUDA error. `op` names
// the caller in messages.
inline absl::Status CheckSm90Device(const char* op) {
  int device = 0, major = 0;
  if (cudaError_t err = cudaGetDevice(&device); err != cudaSuccess) {
    return absl::InternalError(std::string(op) + ": cudaGetDevice: " + cudaGetErrorString(err));
  }
  if (cudaError_t err = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
      err != cudaSuccess) {
    return absl::InternalError(std::string(op) + ": device attribute: " +
                               cudaGetErrorString(err));
  }
  if (major != 9) return absl::UnimplementedError(std::string(op) + ": built for sm_90a only");
  return absl::OkStatus();
}

// Returns launch.template operator()<kBn, kBm, kWarpsN, kWarpsM, kStages>()
// for the instance of `tile` (the values ShapeOfFp8GemmTile gives, which the
// launcher checks against); INVALID_ARGUMENT for kAuto or an unknown tile.
template <typename Launch>
absl::Status DispatchGemmTile(Fp8GemmTile tile, Launch&& launch, const char* op) {
  switch (tile) {
    case Fp8GemmTile::kN16M8:
      return launch.template operator()<16, 8, 1, 1, 6>();
    case Fp8GemmTile::kN16M16:
      return launch.template operator()<16, 16, 1, 1, 6>();
    case Fp8GemmTile::kN16M32:
      return launch.template operator()<16, 32, 1, 1, 5>();
    case Fp8GemmTile::kN16M64:
      return launch.template operator()<16, 64, 1, 1, 4>();
    case Fp8GemmTile::kN32M8:
      return launch.template operator()<32, 8, 2, 1, 6>();
    case Fp8GemmTile::kN32M16:
      return launch.template operator()<32, 16, 2, 1, 6>();
    case Fp8GemmTile::kN32M32:
      return launch.template operator()<32, 32, 2, 1, 5>();
    case Fp8GemmTile::kN32M64:
      return launch.template operator()<32, 64, 2, 1, 4>();
    case Fp8GemmTile::kN64M64:
      return launch.template operator()<64, 64, 4, 1, 6>();
    case Fp8GemmTile::kN128M64:
      return launch.template operator()<128, 64, 8, 1, 4>();
    case Fp8GemmTile::kN128M128:
      return launch.template operator()<128, 128, 2, 4, 4>();
    case Fp8GemmTile::kAuto:
      break;
  }
  return absl::InvalidArgumentError(std::string(op) + ": unknown tile");
}

}  // namespace weir::kernels::cuda::dense

#endif  // WEIR_KERNELS_CUDA_DENSE_SM90_GEMM_LAUNCH_H_
