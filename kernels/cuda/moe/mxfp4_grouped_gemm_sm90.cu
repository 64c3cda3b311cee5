#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "kernels/cuda/launch_status.h"
#include "kernels/cuda/moe/mxfp4_grouped_gemm_params.h"
#include "kernels/cuda/moe/mxfp4_grouped_gemm_sm90.cuh"
#include "kernels/cuda/moe/mxfp4_grouped_gemm_sm90.h"

namespace weir::kernels::cuda {
namespace {

absl::Status CheckDevice(const char* what) {
  int device = 0, major = 0;
  if (cudaError_t err = cudaGetDevice(&device); err != cudaSuccess) {
    return absl::InternalError(std::string(what) + ": cudaGetDevice: " + cudaGetErrorString(err));
  }
  if (cudaError_t err = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
      err != cudaSuccess) {
    return absl::InternalError(std::string(what) +
                               ": device attribute: " + cudaGetErrorString(err));
  }
  if (major != 9) return absl::UnimplementedError(std::string(what) + ": built for sm_90a only");
  return absl::OkStatus();
}

// Instantiates one tile (values from ShapeOfMxfp4GroupedTile, checked here so
// the table and the instances cannot drift) and launches it.
template <int kWarps, int kBm, int kStages, bool kGated, bool kWgmma, bool kF16Wgmma>
absl::Status LaunchTile(const moe::mxfp4_gemm::KernelArgs& args, int num_experts,
                        const Mxfp4GroupedTileShape& shape, const char* what, cudaStream_t stream) {
  if (shape.warps != kWarps || shape.block_m != kBm || shape.stages != kStages) {
    return absl::InternalError(std::string(what) + ": tile table and instances disagree");
  }
  const int block_n = Mxfp4GroupedBlockN(shape, kGated);
  // One expert slot per expert that can have rows: at most `rows` of them.
  const dim3 grid(static_cast<unsigned>((args.n + block_n - 1) / block_n),
                  static_cast<unsigned>(std::min<int64_t>(num_experts, args.rows)));
  constexpr bool kAnyWgmma = kWgmma || kF16Wgmma;
  const int smem =
      Mxfp4GroupedLayout(kWarps, kBm, kStages, Mxfp4WidensXOnce(kBm, kAnyWgmma), kF16Wgmma).total +
      (kAnyWgmma ? dense::fp8_gemm::kWgmmaSmemSlack : 0);
  constexpr int kMinBlocks = Mxfp4MinBlocks(kWarps, kBm, kStages, kGated, kAnyWgmma);
  auto launch = [&](auto kernel) -> absl::Status {
    if (absl::Status s = AllowSharedBytes(kernel, smem, what); !s.ok()) return s;
    kernel<<<grid, kWarps * 32, smem, stream>>>(args);
    return LaunchStatus(what);
  };
  if constexpr (kMinBlocks > 1) {
    return launch(moe::mxfp4_gemm::Mxfp4GroupedKernelBounded<kWarps, kBm, kStages, kGated, kWgmma,
                                                             kF16Wgmma, kMinBlocks>);
  } else {
    return launch(
        moe::mxfp4_gemm::Mxfp4GroupedKernel<kWarps, kBm, kStages, kGated, kWgmma, kF16Wgmma>);
  }
}

template <bool kGated, bool kWgmma, bool kF16Wgmma>
absl::Status LaunchOf(const moe::mxfp4_gemm::KernelArgs& args, int num_experts,
                      Mxfp4GroupedTile tile, const Mxfp4GroupedTileShape& shape, const char* what,
                      cudaStream_t stream) {
  switch (tile) {
    case Mxfp4GroupedTile::kW2M8:
      if constexpr (!kGated && !kWgmma && !kF16Wgmma)
        return LaunchTile<2, 8, 6, false, false, false>(args, num_experts, shape, what, stream);
      break;
    case Mxfp4GroupedTile::kW2M32:
      if constexpr (!kGated && !kWgmma && !kF16Wgmma) {
        return LaunchTile<2, 32, 4, false, false, false>(args, num_experts, shape, what, stream);
      }
      break;
    case Mxfp4GroupedTile::kW4M8:
      return LaunchTile<4, 8, 6, kGated, kWgmma, kF16Wgmma>(args, num_experts, shape, what, stream);
    case Mxfp4GroupedTile::kW4M8S4:
      return LaunchTile<4, 8, 4, kGated, kWgmma, kF16Wgmma>(args, num_experts, shape, what, stream);
    case Mxfp4GroupedTile::kW4M8S3:
      return LaunchTile<4, 8, 3, kGated, kWgmma, kF16Wgmma>(args, num_experts, shape, what, stream);
    case Mxfp4GroupedTile::kW4M16S4:
      return LaunchTile<4, 16, 4, kGated, kWgmma, kF16Wgmma>(args, num_experts, shape, what,
                                                             stream);
    case Mxfp4GroupedTile::kW4M16S3:
      return LaunchTile<4, 16, 3, kGated, kWgmma, kF16Wgmma>(args, num_experts, shape, what,
                                                             stream);
    case Mxfp4GroupedTile::kW4M32:
      return LaunchTile<4, 32, 4, kGated, kWgmma, kF16Wgmma>(args, num_experts, shape, what,
                                                             stream);
    case Mxfp4GroupedTile::kW8M64:
      return LaunchTile<8, 64, 3, kGated, kWgmma, kF16Wgmma>(args, num_experts, shape, what,
                                                             stream);
    case Mxfp4GroupedTile::kW8M128:
      if constexpr (!kF16Wgmma) {  // its f16 X tile would not fit
        return LaunchTile<8, 128, 3, kGated, kWgmma, false>(args, num_experts, shape, what, stream);
      }
      break;
    case Mxfp4GroupedTile::kAuto:
      break;
  }
  return absl::InvalidArgumentError(std::string(what) + ": tile not available for this product");
}

template <bool kGated>
absl::Status Launch(const moe::mxfp4_gemm::KernelArgs& args, int num_experts, Mxfp4GroupedTile tile,
                    int64_t rows_hint, Mxfp4GemmMath math, const char* what, cudaStream_t stream) {
  if (absl::Status s = CheckDevice(what); !s.ok()) return s;
  if (tile == Mxfp4GroupedTile::kAuto) {
    tile =
        ChooseMxfp4GroupedTile(rows_hint > 0 ? rows_hint : args.rows / num_experts, kGated, math);
  }
  const Mxfp4GroupedTileShape shape = ShapeOfMxfp4GroupedTile(tile);
  switch (math) {
    case Mxfp4GemmMath::kWgmma:
      return LaunchOf<kGated, true, false>(args, num_experts, tile, shape, what, stream);
    case Mxfp4GemmMath::kWgmmaF16:
      return LaunchOf<kGated, false, true>(args, num_experts, tile, shape, what, stream);
    case Mxfp4GemmMath::kMmaF16:
      break;
  }
  return LaunchOf<kGated, false, false>(args, num_experts, tile, shape, what, stream);
}

}  // namespace

absl::Status Mxfp4GroupedGemm(const Mxfp4GroupedGemmParams& p, cudaStream_t stream) {
  if (absl::Status s = CheckMxfp4GroupedGemmParams(p); !s.ok()) return s;
  if (p.rows == 0) return absl::OkStatus();
  const moe::mxfp4_gemm::KernelArgs args{.x = p.x,
                                         .x_scales = p.x_scales,
                                         .offsets = p.expert_offsets,
                                         .w = p.w,
                                         .w_scales = p.w_scales,
                                         .w_up = nullptr,
                                         .w_up_scales = nullptr,
                                         .route_weight = nullptr,
                                         .y = p.y,
                                         .h = nullptr,
                                         .h_scales = nullptr,
                                         .rows = p.rows,
                                         .n = p.n,
                                         .k = p.k,
                                         .num_experts = p.num_experts,
                                         .swiglu_limit = 0.0f,
                                         .round_bf16 = p.round_bf16};
  return Launch<false>(args, p.num_experts, p.tile, p.rows_per_expert_hint, p.math,
                       "Mxfp4GroupedGemm", stream);
}

absl::Status Mxfp4GroupedGateUp(const Mxfp4GroupedGateUpParams& p, cudaStream_t stream) {
  if (absl::Status s = CheckMxfp4GroupedGateUpParams(p); !s.ok()) return s;
  if (p.rows == 0) return absl::OkStatus();
  const moe::mxfp4_gemm::KernelArgs args{.x = p.x,
                                         .x_scales = p.x_scales,
                                         .offsets = p.expert_offsets,
                                         .w = p.w1,
                                         .w_scales = p.w1_scales,
                                         .w_up = p.w3,
                                         .w_up_scales = p.w3_scales,
                                         .route_weight = p.route_weight,
                                         .y = nullptr,
                                         .h = p.h,
                                         .h_scales = p.h_scales,
                                         .rows = p.rows,
                                         .n = p.inter,
                                         .k = p.dim,
                                         .num_experts = p.num_experts,
                                         .swiglu_limit = p.swiglu_limit,
                                         .round_bf16 = p.round_bf16};
  return Launch<true>(args, p.num_experts, p.tile, p.rows_per_expert_hint, p.math,
                      "Mxfp4GroupedGateUp", stream);
}

absl::Status Mxfp4ExpertFfn(const Mxfp4ExpertFfnParams& p, cudaStream_t stream) {
  const Mxfp4GroupedGateUpParams gate_up{.x = p.x,
                                         .x_scales = p.x_scales,
                                         .expert_offsets = p.expert_offsets,
                                         .w1 = p.w1,
                                         .w1_scales = p.w1_scales,
                                         .w3 = p.w3,
                                         .w3_scales = p.w3_scales,
                                         .route_weight = p.route_weight,
                                         .h = p.h,
                                         .h_scales = p.h_scales,
                                         .rows = p.rows,
                                         .inter = p.inter,
                                         .dim = p.dim,
                                         .num_experts = p.num_experts,
                                         .swiglu_limit = p.swiglu_limit,
                                         .round_bf16 = p.round_bf16,
                                         .rows_per_expert_hint = p.rows_per_expert_hint,
                                         .tile = p.gate_up_tile,
                                         .math = p.math};
  const Mxfp4GroupedGemmParams down{.x = p.h,
                                    .x_scales = p.h_scales,
                                    .expert_offsets = p.expert_offsets,
                                    .w = p.w2,
                                    .w_scales = p.w2_scales,
                                    .y = p.y,
                                    .rows = p.rows,
                                    .n = p.dim,
                                    .k = p.inter,
                                    .num_experts = p.num_experts,
                                    .round_bf16 = p.round_bf16,
                                    .rows_per_expert_hint = p.rows_per_expert_hint,
                                    .tile = p.down_tile,
                                    .math = p.math};
  if (absl::Status s = CheckMxfp4GroupedGateUpParams(gate_up); !s.ok()) return s;
  if (absl::Status s = CheckMxfp4GroupedGemmParams(down); !s.ok()) return s;
  if (absl::Status s = Mxfp4GroupedGateUp(gate_up, stream); !s.ok()) return s;
  return Mxfp4GroupedGemm(down, stream);
}

}  // namespace weir::kernels::cuda
