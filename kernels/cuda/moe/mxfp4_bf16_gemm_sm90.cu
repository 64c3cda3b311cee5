#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <type_traits>

#include "kernels/cuda/launch_status.h"
#include "kernels/cuda/moe/mxfp4_bf16_decode_sm90.cuh"
#include "kernels/cuda/moe/mxfp4_bf16_gemm_sm90.cuh"
#include "kernels/cuda/moe/mxfp4_bf16_gemm_sm90.h"
#include "kernels/cuda/moe/mxfp4_bf16_rs_sm90.cuh"
#include "kernels/cuda/moe/mxfp4_grouped_gemm_params.h"
#include "kernels/cuda/tma.cuh"

namespace weir::kernels::cuda {

absl::Status Mxfp4Bf16GroupedGemm(const Mxfp4Bf16GroupedGemmParams& p, cudaStream_t stream) {
  if (absl::Status s = CheckMxfp4Bf16GroupedGemmParams(p); !s.ok()) return s;
  if (p.rows == 0) return absl::OkStatus();
  constexpr const char* kWhat = "Mxfp4Bf16GroupedGemm";
  int device = 0, major = 0;
  if (cudaError_t err = cudaGetDevice(&device); err != cudaSuccess) {
    return absl::InternalError(std::string(kWhat) + ": cudaGetDevice: " + cudaGetErrorString(err));
  }
  if (cudaError_t err = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
      err != cudaSuccess) {
    return absl::InternalError(std::string(kWhat) +
                               ": device attribute: " + cudaGetErrorString(err));
  }
  if (major != 9) return absl::UnimplementedError(std::string(kWhat) + ": built for sm_90a only");

  namespace mb = moe::mxfp4_bf16;
  mb::Args a{};
  const uint64_t row = static_cast<uint64_t>(p.k) * 2;
  const int x_rows = p.register_a || p.decode_mma ? Mxfp4Bf16XRows(p) : mb::kBm;
  // x_multicast: each CTA of a pair brings half the box.
  const int x_box_rows = p.x_multicast ? x_rows / 2 : x_rows;
  if (absl::Status s = EncodeTmaRowsMap(&a.x_map, p.x, row, static_cast<uint64_t>(p.rows), 1, row,
                                        row * static_cast<uint64_t>(p.rows), x_box_rows);
      !s.ok()) {
    return s;
  }
  if (p.tail_rows) {
    if (absl::Status s =
            EncodeTmaRowsMap(&a.x_tail_map, p.x, row, static_cast<uint64_t>(p.rows), 1, row,
                             row * static_cast<uint64_t>(p.rows), kMxfp4Bf16TailRows);
        !s.ok()) {
      return s;
    }
  }
  a.x = p.x;
  a.offsets = p.expert_offsets;
  a.w = p.w;
  a.w_scales = p.w_scales;
  a.y = p.y;
  a.row_role = p.row_role;
  a.role = p.role;
  a.rows = p.rows;
  a.n = p.n;
  a.k = p.k;
  a.groups = p.num_experts;
  a.bf16_out = p.output == dense::Fp8GemmOutput::kBf16;
  a.round_f32 = p.output == dense::Fp8GemmOutput::kF32RoundedBf16;
  a.ballot_search = p.ballot_group_search;
  a.w_up = p.w_up;
  a.w_up_scales = p.w_up_scales;
  a.route_weight = p.swiglu_route_weight;
  a.h_codes = p.h_codes;
  a.h_scales = p.h_scales;
  a.h_bf16 = p.h_bf16;
  a.limit = p.swiglu_limit;
  a.round_bf16 = p.swiglu_round_bf16;
  const int wgs = Mxfp4Bf16ConsumerWarpgroups(p);
  // The gate / up / SwiGLU form's CTA holds 64 rows of each product.
  // (The decode form's CTA: 128 columns, gated or not.)
  const int tile_n = p.decode_mma   ? 16 * kMxfp4Bf16DecodeWarps
                     : p.swiglu     ? mb::RsTileN(wgs) / 2
                     : p.register_a ? mb::RsTileN(wgs)
                                    : mb::kBn;
  // x_multicast: pairs of CTAs along x (an odd count gets one more, whose W
  // rows are all past n: it brings its half of X and writes nothing).
  const unsigned tiles_n = static_cast<unsigned>((p.n + tile_n - 1) / tile_n);
  const dim3 grid(p.x_multicast ? (tiles_n + 1) / 2 * 2 : tiles_n,
                  static_cast<unsigned>((p.rows + x_rows - 1) / x_rows + p.num_experts));
  const auto launch = [&](auto kernel, int threads, int smem) -> absl::Status {
    if (absl::Status s = AllowSharedBytes(kernel, smem, kWhat); !s.ok()) return s;
    kernel<<<grid, threads, smem, stream>>>(a);
    return LaunchStatus(kWhat);
  };
  const auto launch_pairs = [&](auto kernel, int threads, int smem) -> absl::Status {
    if (absl::Status s = AllowSharedBytes(kernel, smem, kWhat); !s.ok()) return s;
    cudaLaunchConfig_t config{};
    config.gridDim = grid;
    config.blockDim = dim3(static_cast<unsigned>(threads));
    config.dynamicSmemBytes = static_cast<size_t>(smem);
    config.stream = stream;
    cudaLaunchAttribute cluster{};
    cluster.id = cudaLaunchAttributeClusterDimension;
    cluster.val.clusterDim.x = 2;
    cluster.val.clusterDim.y = 1;
    cluster.val.clusterDim.z = 1;
    config.attrs = &cluster;
    config.numAttrs = 1;
    if (cudaError_t err = cudaLaunchKernelEx(&config, kernel, a); err != cudaSuccess) {
      return absl::InternalError(std::string(kWhat) +
                                 ": cudaLaunchKernelEx: " + cudaGetErrorString(err));
    }
    return LaunchStatus(kWhat);
  };
  constexpr int kSlack = dense::fp8_gemm::kWgmmaSmemSlack;
  if (p.decode_mma) {  // checked: x_rows 8 or 16, none of the register form's options
    if (p.swiglu) {
      return x_rows == 8 ? launch(mb::Mxfp4Bf16DecodeKernel<8, true>, mb::kDecodeThreads,
                                  Mxfp4Bf16DecodeLayoutOf(8, true).total)
                         : launch(mb::Mxfp4Bf16DecodeKernel<16, true>, mb::kDecodeThreads,
                                  Mxfp4Bf16DecodeLayoutOf(16, true).total);
    }
    return x_rows == 8 ? launch(mb::Mxfp4Bf16DecodeKernel<8, false>, mb::kDecodeThreads,
                                Mxfp4Bf16DecodeLayoutOf(8).total)
                       : launch(mb::Mxfp4Bf16DecodeKernel<16, false>, mb::kDecodeThreads,
                                Mxfp4Bf16DecodeLayoutOf(16).total);
  }
  if (p.register_a) {
    const auto rs = [&](auto rows) -> absl::Status {
      constexpr int kRows = decltype(rows)::value;
      constexpr int kShared = mb::RsSlot<kRows>::kShared + kSlack;
      if constexpr (kRows == 128) {
        if (wgs == 3) {  // checked: with stage_scale_test; with the deep ring only without fit
          constexpr int kShared3 = mb::RsSlot<128, mb::RsTileN(3)>::kShared + kSlack;
          if (p.deep_ring) {
            return launch(mb::Mxfp4Bf16GroupedRsKernel<128, true, true, false, 3>,
                          mb::RsThreadsWith(3), kShared3);
          }
          return p.fit_tile_rows ? launch(mb::Mxfp4Bf16GroupedRsKernel<128, false, true, true, 3>,
                                          mb::RsThreadsWith(3), kShared3)
                                 : launch(mb::Mxfp4Bf16GroupedRsKernel<128, false, true, false, 3>,
                                          mb::RsThreadsWith(3), kShared3);
        }
        if (p.fit_tile_rows) {  // checked: with stage_scale_test, without the deep ring
          return launch(mb::Mxfp4Bf16GroupedRsKernel<128, false, true, true>, mb::kRsThreads,
                        kShared);
        }
      }
      if (p.deep_ring) {  // checked: the one scale test a stage only over three warpgroups
        return launch(mb::Mxfp4Bf16GroupedRsKernel<kRows, true>, mb::kRsThreads, kShared);
      }
      if (p.stage_scale_test) {
        return launch(mb::Mxfp4Bf16GroupedRsKernel<kRows, false, true>, mb::kRsThreads, kShared);
      }
      return launch(mb::Mxfp4Bf16GroupedRsKernel<kRows, false>, mb::kRsThreads, kShared);
    };
    if (x_rows == 256) {  // checked: with the deep ring and the one scale test, two warpgroups
      constexpr int kShared256 = mb::RsSlot<256>::kShared + kSlack;
      if (p.tail_rows) {  // checked: x_rows 256 only
        constexpr int kTail = kMxfp4Bf16TailRows;
        constexpr int kSharedTail = mb::RsSlot<256, mb::kBn, kTail>::kShared + kSlack;
        if (p.x_multicast) {  // checked: x_rows 256 only
          if (p.swiglu) {
            return launch_pairs(
                mb::Mxfp4Bf16GroupedRsKernel<256, true, true, false, 2, true, kTail, true>,
                mb::RsCtaThreads(256, 2), kSharedTail);
          }
          return launch_pairs(
              mb::Mxfp4Bf16GroupedRsKernel<256, true, true, false, 2, false, kTail, true>,
              mb::RsCtaThreads(256, 2), kSharedTail);
        }
        if (p.swiglu) {
          return launch(mb::Mxfp4Bf16GroupedRsKernel<256, true, true, false, 2, true, kTail>,
                        mb::RsCtaThreads(256, 2), kSharedTail);
        }
        return launch(mb::Mxfp4Bf16GroupedRsKernel<256, true, true, false, 2, false, kTail>,
                      mb::RsCtaThreads(256, 2), kSharedTail);
      }
      if (p.x_multicast) {
        if (p.swiglu) {
          return launch_pairs(
              mb::Mxfp4Bf16GroupedRsKernel<256, true, true, false, 2, true, 0, true>,
              mb::RsCtaThreads(256, 2), kShared256);
        }
        return launch_pairs(mb::Mxfp4Bf16GroupedRsKernel<256, true, true, false, 2, false, 0, true>,
                            mb::RsCtaThreads(256, 2), kShared256);
      }
      if (p.swiglu) {
        return launch(mb::Mxfp4Bf16GroupedRsKernel<256, true, true, false, 2, true>,
                      mb::RsCtaThreads(256, 2), kShared256);
      }
      return launch(mb::Mxfp4Bf16GroupedRsKernel<256, true, true, false, 2>,
                    mb::RsCtaThreads(256, 2), kShared256);
    }
    switch (x_rows) {
      case 8:
        return rs(std::integral_constant<int, 8>{});
      case 16:
        return rs(std::integral_constant<int, 16>{});
      case 32:
        return rs(std::integral_constant<int, 32>{});
      case 64:
        return rs(std::integral_constant<int, 64>{});
      case 80:
        return rs(std::integral_constant<int, 80>{});
      default:
        return rs(std::integral_constant<int, 128>{});
    }
  }
  const int smem = mb::kSharedBytes + kSlack;
  if (Mxfp4Bf16WidenerWarps(p) == 8) {
    return launch(mb::Mxfp4Bf16GroupedKernel<8>, mb::ThreadsWith(8), smem);
  }
  return launch(mb::Mxfp4Bf16GroupedKernel<4>, mb::ThreadsWith(4), smem);
}

}  // namespace weir::kernels::cuda
