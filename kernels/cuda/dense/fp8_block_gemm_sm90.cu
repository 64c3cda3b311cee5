#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "kernels/cuda/dense/fp8_block_gemm_params.h"
#include "kernels/cuda/dense/fp8_block_gemm_sm90.cuh"
#include "kernels/cuda/dense/fp8_block_gemm_sm90.h"
#include "kernels/cuda/dense/fp8_block_gemm_ws_sm90.cuh"
#include "kernels/cuda/dense/sm90_gemm_launch.h"
#include "kernels/cuda/launch_status.h"
#include "kernels/cuda/tma.cuh"

namespace weir::kernels::cuda::dense {
namespace {

// The kernels' arguments of `p` (strides resolved; no split counters, no
// tensor maps, no prefetch yet).
fp8_gemm::KernelArgs ArgsOf(const Fp8BlockGemmParams& p) {
  const int64_t n_groups = (p.n + 31) / 32;
  // With group_offsets every group's rows come from the offsets: no X or Y strides.
  const bool x_strided = !p.x_shared && p.group_offsets == nullptr;
  return fp8_gemm::KernelArgs{
      p.x,
      p.x_scales,
      p.w,
      p.w_scales,
      p.y,
      p.m,
      p.n,
      p.k,
      p.output == Fp8GemmOutput::kBf16,
      p.output == Fp8GemmOutput::kF32RoundedBf16,
      !x_strided ? 0 : (p.x_group_stride != 0 ? p.x_group_stride : p.m * p.k),
      !x_strided ? 0 : (p.x_scales_group_stride != 0 ? p.x_scales_group_stride : p.m * (p.k / 32)),
      p.w_group_stride != 0 ? p.w_group_stride : p.n * p.k,
      p.w_scales_group_stride != 0 ? p.w_scales_group_stride : n_groups * (p.k / 32),
      p.group_offsets != nullptr ? 0 : (p.y_group_stride != 0 ? p.y_group_stride : p.m * p.n),
      p.k_splits,
      p.split_scratch,
      nullptr,
      p.group_offsets,
      {},
      {}};
}

// Instantiates the kernel of one tile (values from ShapeOfFp8GemmTile,
// checked by DispatchGemmTile) and launches it.
template <int kBn, int kBm, int kWarpsN, int kWarpsM, int kStages>
absl::Status LaunchTile(const Fp8BlockGemmParams& p, const Fp8GemmTileShape& shape,
                        cudaStream_t stream) {
  fp8_gemm::KernelArgs args = ArgsOf(p);
  const dim3 grid(static_cast<unsigned>((p.n + kBn - 1) / kBn),
                  static_cast<unsigned>((p.m + kBm - 1) / kBm),
                  static_cast<unsigned>(p.groups * p.k_splits));
  // The last split of each tile sums the partials when there are counters
  // for every tile and at most kFp8GemmFusedReduceMaxM rows; else the second
  // kernel does (at m = 64 the last CTA's serial sum of its 64 x 64 tile
  // cost more than the launch it saves: main_proj 68.9 -> 98.9 us).
  const bool rope = Fp8GemmRopeApplies(p);  // the second kernel rotates Y: no fused sum
  const bool fused_reduce = !rope && p.k_splits > 1 && p.split_counters != nullptr &&
                            p.m <= kFp8GemmFusedReduceMaxM &&
                            p.split_counter_count >= int64_t{grid.x} * grid.y * p.groups;
  if (fused_reduce) args.counters = p.split_counters;
  args.prefetch_w = p.prefetch_weights && p.group_offsets == nullptr;
  const int threads = kWarpsN * kWarpsM * 32;
  // kWgmmaF16: the f16 X tile after the rest (Fp8GemmF16XOffset).
  const int smem =
      p.math == Fp8GemmMath::kWgmmaF16
          ? static_cast<int>(Fp8GemmF16XOffset(Fp8GemmSharedBytes(shape)) + Fp8GemmF16XBytes(kBm)) +
                fp8_gemm::kWgmmaSmemSlack
          : static_cast<int>(Fp8GemmSharedBytes(shape)) +
                (p.math == Fp8GemmMath::kWgmma ? fp8_gemm::kWgmmaSmemSlack : 0);
  auto launch = [&](auto kernel) -> absl::Status {
    if (absl::Status s = AllowSharedBytes(kernel, smem, "Fp8BlockGemm"); !s.ok()) return s;
    kernel<<<grid, threads, smem, stream>>>(args);
    if (rope) {
      constexpr int kThreads = 256;
      const SplitRope r{p.rope.positions, p.rope.cos_sin, p.rope.cos_sin_rows,
                        p.rope.head_dim,  p.rope.dim,     p.rope.round_bf16};
      SplitReduceRopeKernel<<<static_cast<unsigned>((p.m * p.n + kThreads - 1) / kThreads),
                              kThreads, 0, stream>>>(p.split_scratch, static_cast<float*>(p.y),
                                                     p.m * p.n, p.n, p.k_splits, args.round_f32, r);
    } else if (p.k_splits > 1 && !fused_reduce) {
      LaunchSplitReduce(p.split_scratch, p.y, p.m * p.n, p.groups, p.k_splits, args.y_stride,
                        args.bf16_out, args.round_f32, /*n=*/0, /*ldy=*/0, /*row_role=*/nullptr,
                        /*role=*/0, stream);
    }
    return LaunchStatus("Fp8BlockGemm");
  };
  // Both scale paths run the same arithmetic (same bits); they differ in speed.
  const bool async_scales = p.k % kFp8GemmStageK == 0 &&
                            reinterpret_cast<uintptr_t>(p.x_scales) % 4 == 0 &&
                            reinterpret_cast<uintptr_t>(p.w_scales) % 4 == 0 &&
                            (p.groups == 1 || (args.xs_stride % 4 == 0 && args.ws_stride % 4 == 0));
  if (fp8_gemm::Fp8GemmUsesTma(kBm, async_scales, Fp8GemmMathIsWgmma(p.math))) {
    // The code matrices as tensor maps (strides are multiples of 16 and the
    // bases 16-byte aligned: CheckFp8BlockGemmParams).
    const bool x_grouped = args.x_stride != 0 && p.groups > 1;
    if (absl::Status s =
            EncodeTmaRowsMap(&args.w_map, p.w, p.k, p.n, p.groups, p.k, args.w_stride, kBn);
        !s.ok()) {
      return s;
    }
    if (absl::Status s = EncodeTmaRowsMap(&args.x_map, p.x, p.k, p.m, x_grouped ? p.groups : 1, p.k,
                                          x_grouped ? args.x_stride : p.m * p.k, kBm);
        !s.ok()) {
      return s;
    }
  }
  if (p.math == Fp8GemmMath::kWgmmaF16) {
    if constexpr (kWarpsM == 1 && kWarpsN % 4 == 0 && kBn == 16 * kWarpsN) {
      if (async_scales) {
        return launch(
            fp8_gemm::Fp8BlockGemmKernel<kBn, kBm, kWarpsN, kWarpsM, kStages, true, false, true>);
      }
      return launch(
          fp8_gemm::Fp8BlockGemmKernel<kBn, kBm, kWarpsN, kWarpsM, kStages, false, false, true>);
    }
    return absl::InvalidArgumentError("Fp8BlockGemm: this tile cannot run wgmma");
  }
  if (p.math == Fp8GemmMath::kWgmma) {
    // Instances only for the tiles that can run it (CheckFp8BlockGemmParams
    // refuses the others).
    if constexpr (kWarpsM == 1 && kWarpsN % 4 == 0 && kBn == 16 * kWarpsN) {
      if (async_scales) {
        return launch(
            fp8_gemm::Fp8BlockGemmKernel<kBn, kBm, kWarpsN, kWarpsM, kStages, true, true>);
      }
      return launch(fp8_gemm::Fp8BlockGemmKernel<kBn, kBm, kWarpsN, kWarpsM, kStages, false, true>);
    }
    return absl::InvalidArgumentError("Fp8BlockGemm: this tile cannot run wgmma");
  }
  if constexpr (Fp8GemmTileIsWgmmaOnly(kBm, kWarpsM)) {
    return absl::InvalidArgumentError("Fp8BlockGemm: this tile runs wgmma only");
  } else {
    if (async_scales) {
      return launch(fp8_gemm::Fp8BlockGemmKernel<kBn, kBm, kWarpsN, kWarpsM, kStages, true>);
    }
    return launch(fp8_gemm::Fp8BlockGemmKernel<kBn, kBm, kWarpsN, kWarpsM, kStages, false>);
  }
}

// kN128M128Ws (fp8_block_gemm_ws_sm90.cuh): one CTA of 384 threads a 128 x
// 128 tile of Y^T; CheckFp8BlockGemmParams has established Fp8GemmWsApplies.
// A split is summed by the CTA itself (KernelArgs::fold_splits): no partials,
// no second kernel.
absl::Status LaunchWs(const Fp8BlockGemmParams& p, cudaStream_t stream) {
  fp8_gemm::KernelArgs args = ArgsOf(p);
  args.prefetch_w = p.prefetch_weights && p.group_offsets == nullptr;
  // A split is summed inside the CTA (the second kernel's order and bits).
  args.fold_splits = p.k_splits > 1;
  args.groups = p.groups;
  const bool x_grouped = args.x_stride != 0 && p.groups > 1;
  if (absl::Status s = EncodeTmaRowsMap(&args.w_map, p.w, p.k, p.n, p.groups, p.k, args.w_stride,
                                        fp8_gemm::kWsBn);
      !s.ok()) {
    return s;
  }
  // X: the codes, or their f16 panel (rows of 2 k bytes, groups packed);
  // kWgmma reads the codes (a panel, if given, is not read).
  const bool e4m3 = p.math == Fp8GemmMath::kWgmma;
  const absl::Status x_map =
      p.x_f16 != nullptr && !e4m3
          ? EncodeTmaRowsMap(&args.x_map, p.x_f16, 2 * p.k, p.m, x_grouped ? p.groups : 1, 2 * p.k,
                             2 * p.m * p.k, fp8_gemm::kWsBm)
          : EncodeTmaRowsMap(&args.x_map, p.x, p.k, p.m, x_grouped ? p.groups : 1, p.k,
                             x_grouped ? args.x_stride : p.m * p.k, fp8_gemm::kWsBm);
  if (!x_map.ok()) return x_map;
  // With group offsets the grid is compact: ceil(m / 128) + groups items
  // cover every group's row tiles (each group's last tile may be partial).
  const int64_t row_tiles = (p.m + fp8_gemm::kWsBm - 1) / fp8_gemm::kWsBm;
  const dim3 grid(
      static_cast<unsigned>((p.n + fp8_gemm::kWsBn - 1) / fp8_gemm::kWsBn),
      static_cast<unsigned>(p.group_offsets != nullptr ? row_tiles + p.groups : row_tiles),
      static_cast<unsigned>(p.group_offsets != nullptr ? 1 : p.groups));
  auto launch = [&]<bool kPanel, bool kHalves, bool kScaled = false, bool kE4m3 = false>()
                    ->absl::Status {
    const int smem =
        fp8_gemm::WsLayout<kPanel, kScaled, kE4m3>::kSharedBytes + fp8_gemm::kWgmmaSmemSlack;
    constexpr auto kernel = fp8_gemm::Fp8BlockGemmWsKernel<kPanel, kHalves, kScaled, kE4m3>;
    if (absl::Status s = AllowSharedBytes(kernel, smem, "Fp8BlockGemm"); !s.ok()) return s;
    kernel<<<grid, fp8_gemm::kWsThreads, smem, stream>>>(args);
    return LaunchStatus("Fp8BlockGemm");
  };
  if (e4m3) return launch.template operator()<false, false, false, true>();
  if (p.x_f16_scaled) return launch.template operator()<true, false, true>();
  if (p.ws_halves) {
    return p.x_f16 != nullptr ? launch.template operator()<true, true>()
                              : launch.template operator()<false, true>();
  }
  return p.x_f16 != nullptr ? launch.template operator()<true, false>()
                            : launch.template operator()<false, false>();
}

// An f16 pair times 2^a (a in [-15, 7]), through fp32: exact for the f16 of
// any e4m3 value (Fp8PanelScaleInRange), subnormal results included.
__device__ __forceinline__ uint32_t ScaleF16x2(uint32_t h2, float scale) {
  const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&h2));
  const __half2 r = __floats2half2_rn(f.x * scale, f.y * scale);
  return *reinterpret_cast<const uint32_t*>(&r);
}

// WidenFp8ToF16Panel: a thread takes 16 codes of a row (one 16-byte load)
// and writes their 16 f16 values as the panel's two chunks: the words' low
// code pairs, then the high ones (Fp8GemmF16PanelColumn). With scales
// (kScaled), a block whose byte is in range is written times
// 2^(e + kFp8PanelScaleShift).
template <bool kScaled>
__global__ void WidenFp8ToF16PanelKernel(const Fp8F16PanelParams p, int64_t code_group_stride,
                                         int64_t scale_group_stride) {
  GridDependencyPrologue();
  const int64_t chunks = p.k / 16;
  const int64_t per_group = p.rows * chunks;
  const int64_t total = per_group * p.groups;
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < total;
       t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t g = t / per_group, rc = t % per_group;
    const int64_t r = rc / chunks, q = rc % chunks;
    const uint4 c =
        *reinterpret_cast<const uint4*>(p.codes + g * code_group_stride + r * p.k + 16 * q);
    const uint32_t w[4] = {c.x, c.y, c.z, c.w};
    uint4 lo, hi;
    lo.x = fp8_gemm::E4m3x2ToF16x2(w[0]);
    lo.y = fp8_gemm::E4m3x2ToF16x2(w[1]);
    lo.z = fp8_gemm::E4m3x2ToF16x2(w[2]);
    lo.w = fp8_gemm::E4m3x2ToF16x2(w[3]);
    hi.x = fp8_gemm::E4m3x2ToF16x2(w[0] >> 16);
    hi.y = fp8_gemm::E4m3x2ToF16x2(w[1] >> 16);
    hi.z = fp8_gemm::E4m3x2ToF16x2(w[2] >> 16);
    hi.w = fp8_gemm::E4m3x2ToF16x2(w[3] >> 16);
    if constexpr (kScaled) {
      const uint32_t byte =
          p.scales[g * scale_group_stride + r * (p.k / kFp8GemmScaleBlock) + q / 2];
      if (Fp8PanelScaleInRange(byte)) {
        // 2^(byte - 127 + shift), a normal float.
        const float scale = __uint_as_float((byte + kFp8PanelScaleShift) << 23);
        for (uint4* v : {&lo, &hi}) {
          v->x = ScaleF16x2(v->x, scale);
          v->y = ScaleF16x2(v->y, scale);
          v->z = ScaleF16x2(v->z, scale);
          v->w = ScaleF16x2(v->w, scale);
        }
      }
    }
    uint4* out = reinterpret_cast<uint4*>(p.out + (g * p.rows + r) * p.k + 16 * q);
    out[0] = lo;
    out[1] = hi;
  }
}

}  // namespace

absl::Status WidenFp8ToF16Panel(const Fp8F16PanelParams& p, cudaStream_t stream) {
  if (absl::Status s = CheckFp8F16PanelParams(p); !s.ok()) return s;
  const int64_t total = p.groups * p.rows * (p.k / 16);
  if (total == 0) return absl::OkStatus();
  constexpr int kThreads = 256;
  const int64_t blocks = std::min<int64_t>((total + kThreads - 1) / kThreads, int64_t{1} << 20);
  const int64_t code_stride = p.code_group_stride != 0 ? p.code_group_stride : p.rows * p.k;
  const int64_t scale_stride =
      p.scale_group_stride != 0 ? p.scale_group_stride : p.rows * (p.k / kFp8GemmScaleBlock);
  if (p.scales != nullptr) {
    WidenFp8ToF16PanelKernel<true>
        <<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(p, code_stride, scale_stride);
  } else {
    WidenFp8ToF16PanelKernel<false>
        <<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(p, code_stride, scale_stride);
  }
  return LaunchStatus("WidenFp8ToF16Panel");
}

absl::Status Fp8BlockGemm(const Fp8BlockGemmParams& p, cudaStream_t stream) {
  if (ResolveFp8GemmTile(p) == Fp8GemmTile::kN128M128Ws) {
    if (absl::Status s = CheckFp8BlockGemmParams(p); !s.ok()) return s;
    if (absl::Status s = CheckSm90Device("Fp8BlockGemm"); !s.ok()) return s;
    return LaunchWs(p, stream);
  }
  return RunGemmTile(
      p, CheckFp8BlockGemmParams(p), "Fp8BlockGemm",
      [&]<int kBn, int kBm, int kWarpsN, int kWarpsM, int kStages>(const Fp8GemmTileShape& shape) {
        return LaunchTile<kBn, kBm, kWarpsN, kWarpsM, kStages>(p, shape, stream);
      });
}

}  // namespace weir::kernels::cuda::dense
