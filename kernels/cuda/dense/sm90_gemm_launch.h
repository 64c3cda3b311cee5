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

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "kernels/cuda/dense/fp8_block_gemm_params.h"
#include "kernels/cuda/launch_status.h"

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

namespace sm90_gemm_internal {

// Checks the instance's values against ShapeOfFp8GemmTile(tile), so the
// table and the instances cannot drift, then launches it.
template <int kBn, int kBm, int kWarpsN, int kWarpsM, int kStages, typename Launch>
absl::Status Instance(Fp8GemmTile tile, Launch& launch, const char* op) {
  const Fp8GemmTileShape s = ShapeOfFp8GemmTile(tile);
  if (s.block_n != kBn || s.block_m != kBm || s.warps_n != kWarpsN || s.warps_m != kWarpsM ||
      s.stages != kStages) {
    return absl::InternalError(std::string(op) + ": tile table and instances disagree");
  }
  return launch.template operator()<kBn, kBm, kWarpsN, kWarpsM, kStages>();
}

}  // namespace sm90_gemm_internal

// Returns launch.template operator()<kBn, kBm, kWarpsN, kWarpsM, kStages>()
// for the instance of `tile` (INTERNAL if those values are not what
// ShapeOfFp8GemmTile gives); INVALID_ARGUMENT for kAuto or an unknown tile.
template <typename Launch>
absl::Status DispatchGemmTile(Fp8GemmTile tile, Launch&& launch, const char* op) {
  using sm90_gemm_internal::Instance;
  switch (tile) {
    case Fp8GemmTile::kN16M8:
      return Instance<16, 8, 1, 1, 6>(tile, launch, op);
    case Fp8GemmTile::kN16M16:
      return Instance<16, 16, 1, 1, 6>(tile, launch, op);
    case Fp8GemmTile::kN16M32:
      return Instance<16, 32, 1, 1, 5>(tile, launch, op);
    case Fp8GemmTile::kN16M64:
      return Instance<16, 64, 1, 1, 4>(tile, launch, op);
    case Fp8GemmTile::kN16M32W2:
      return Instance<16, 32, 1, 2, 5>(tile, launch, op);
    case Fp8GemmTile::kN16M64W4:
      return Instance<16, 64, 1, 4, 4>(tile, launch, op);
    case Fp8GemmTile::kN32M64W4:
      return Instance<32, 64, 1, 4, 4>(tile, launch, op);
    case Fp8GemmTile::kN64M64W4:
      return Instance<64, 64, 2, 2, 4>(tile, launch, op);
    case Fp8GemmTile::kN32M8:
      return Instance<32, 8, 2, 1, 6>(tile, launch, op);
    case Fp8GemmTile::kN32M16:
      return Instance<32, 16, 2, 1, 6>(tile, launch, op);
    case Fp8GemmTile::kN32M32:
      return Instance<32, 32, 2, 1, 5>(tile, launch, op);
    case Fp8GemmTile::kN32M64:
      return Instance<32, 64, 2, 1, 4>(tile, launch, op);
    case Fp8GemmTile::kN64M64:
      return Instance<64, 64, 4, 1, 6>(tile, launch, op);
    case Fp8GemmTile::kN128M64:
      return Instance<128, 64, 8, 1, 4>(tile, launch, op);
    case Fp8GemmTile::kN128M128:
      return Instance<128, 128, 2, 4, 4>(tile, launch, op);
    case Fp8GemmTile::kN64M8:
      return Instance<64, 8, 4, 1, 6>(tile, launch, op);
    case Fp8GemmTile::kN64M16:
      return Instance<64, 16, 4, 1, 6>(tile, launch, op);
    case Fp8GemmTile::kN64M32:
      return Instance<64, 32, 4, 1, 5>(tile, launch, op);
    case Fp8GemmTile::kN64M8S4:
      return Instance<64, 8, 4, 1, 4>(tile, launch, op);
    case Fp8GemmTile::kN64M8S3:
      return Instance<64, 8, 4, 1, 3>(tile, launch, op);
    case Fp8GemmTile::kN128M128Wg:
      return Instance<128, 128, 8, 1, 4>(tile, launch, op);
    case Fp8GemmTile::kN128M128Ws:  // launched by Fp8BlockGemm itself (LaunchWs)
    case Fp8GemmTile::kAuto:
      break;
  }
  return absl::InvalidArgumentError(std::string(op) + ": unknown tile");
}

// The entry of a tile-dispatched GEMM (Fp8BlockGemm, Bf16Gemm): `checked`
// (its parameter check) first, then the device check, then the tile (kAuto:
// ChooseFp8GemmTile(m, n)) and launch_tile.template operator()<kBn, kBm,
// kWarpsN, kWarpsM, kStages>(shape) for that tile's instance.
template <typename Params, typename LaunchTile>
absl::Status RunGemmTile(const Params& p, const absl::Status& checked, const char* op,
                         LaunchTile&& launch_tile) {
  if (!checked.ok()) return checked;
  if (absl::Status s = CheckSm90Device(op); !s.ok()) return s;
  Fp8GemmTile tile = p.tile;
  if (tile == Fp8GemmTile::kAuto) {
    if constexpr (requires { p.math; }) {  // Fp8BlockGemm: the math picks among its tiles
      tile = ChooseFp8GemmTile(p.m, p.n, p.math);
    } else {
      tile = ChooseFp8GemmTile(p.m, p.n);
    }
  }
  const Fp8GemmTileShape shape = ShapeOfFp8GemmTile(tile);
  return DispatchGemmTile(
      tile,
      [&]<int kBn, int kBm, int kWarpsN, int kWarpsM, int kStages>() {
        return launch_tile.template operator()<kBn, kBm, kWarpsN, kWarpsM, kStages>(shape);
      },
      op);
}

}  // namespace weir::kernels::cuda::dense

#endif  // WEIR_KERNELS_CUDA_DENSE_SM90_GEMM_LAUNCH_H_
