// kernels/cuda/dense/bf16_gemm_cutlass.cu — Bf16GemmCutlass (see the header):
// one CUTLASS GEMM type per output element type, built by CUTLASS's Hopper
// collective builders. No kernel of this project's own.
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/kernel_hardware_info.h"
#include "kernels/cuda/dense/bf16_gemm_cutlass.h"
#include "kernels/cuda/dense/bf16_gemm_params.h"

namespace weir::kernels::cuda::dense {
namespace {

constexpr const char* kWhat = "Bf16GemmCutlass";

// kF32RoundedBf16's epilogue: each fp32 sum rounded to bf16 (nearest even)
// and kept as fp32, the value Bf16Gemm's RoundToBf16 writes.
template <typename T>
struct RoundedToBf16 {
  CUTLASS_HOST_DEVICE T operator()(T const& v) const {
    return static_cast<T>(cutlass::bfloat16_t(v));
  }
};
template <typename T, int N>
struct RoundedToBf16<cutlass::Array<T, N>> {
  CUTLASS_HOST_DEVICE cutlass::Array<T, N> operator()(cutlass::Array<T, N> const& v) const {
    cutlass::Array<T, N> r;
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < N; ++i) r[i] = static_cast<T>(cutlass::bfloat16_t(v[i]));
    return r;
  }
};

// X [m, k] row-major (CUTLASS's A, K-major), W [n, k] row-major (CUTLASS's B
// as a column-major k x n, K-major), Y [m, n] row-major with its own row
// stride; groups as CUTLASS's batch mode L. No source C: y = 1 x the sums,
// or with kRound (fp32 y only) the sums rounded to bf16 values.
template <typename ElementD, bool kRound = false, int kTileN = 256>
struct CutlassBf16 {
  using ElementA = cutlass::bfloat16_t;
  using ElementB = cutlass::bfloat16_t;
  using LayoutA = cutlass::layout::RowMajor;
  using LayoutB = cutlass::layout::ColumnMajor;
  using LayoutD = cutlass::layout::RowMajor;
  static constexpr int kAlignA = 8, kAlignB = 8;
  static constexpr int kAlignD = 16 / static_cast<int>(sizeof(ElementD));
  using TileShape = cute::Shape<cute::_128, cute::Int<kTileN>, cute::_64>;
  using ClusterShape = cute::Shape<cute::_2, cute::_1, cute::_1>;
  static constexpr auto kRn = cutlass::FloatRoundStyle::round_to_nearest;
  using Fusion = cute::conditional_t<
      kRound,
      cutlass::epilogue::fusion::Sm90EVT<
          cutlass::epilogue::fusion::Sm90Compute<RoundedToBf16, ElementD, float, kRn>,
          cutlass::epilogue::fusion::Sm90AccFetch>,
      cutlass::epilogue::fusion::LinearCombination<ElementD, float, void, float, kRn>>;
  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, LayoutD, kAlignD,
      ElementD, LayoutD, kAlignD, cutlass::epilogue::TmaWarpSpecializedCooperative,
      Fusion>::CollectiveOp;
  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, ElementA, LayoutA, kAlignA, ElementB,
      LayoutB, kAlignB, float, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
          sizeof(typename Epilogue::SharedStorage))>,
      cutlass::gemm::KernelTmaWarpSpecializedCooperative>::CollectiveOp;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<cute::Shape<int, int, int, int>, Mainloop,
                                                      Epilogue, cutlass::gemm::PersistentScheduler>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
};

std::string CutlassError(cutlass::Status s) { return cutlassGetStatusString(s); }

template <typename ElementD, bool kRound = false, int kTileN = 256>
absl::Status Run(const Bf16GemmParams& p, cudaStream_t stream) {
  using G = CutlassBf16<ElementD, kRound, kTileN>;
  using Gemm = typename G::Gemm;
  const int64_t ldy = p.y_row_stride != 0 ? p.y_row_stride : p.n;
  const int64_t x_group = p.x_group_stride != 0 ? p.x_group_stride : p.m * p.k;
  const int64_t w_group = p.w_group_stride != 0 ? p.w_group_stride : p.n * p.k;
  const int64_t y_group = p.y_group_stride != 0 ? p.y_group_stride : p.m * ldy;
  typename Gemm::GemmKernel::StrideA stride_x{p.k, cute::Int<1>{}, x_group};
  typename Gemm::GemmKernel::StrideB stride_w{p.k, cute::Int<1>{}, w_group};
  typename Gemm::GemmKernel::StrideD stride_y{ldy, cute::Int<1>{}, y_group};
  int device = 0;
  if (cudaError_t err = cudaGetDevice(&device); err != cudaSuccess) {
    return absl::InternalError(absl::StrCat(kWhat, ": cudaGetDevice: ", cudaGetErrorString(err)));
  }
  cutlass::KernelHardwareInfo hw;
  hw.device_id = device;
  hw.sm_count = cutlass::KernelHardwareInfo::query_device_multiprocessor_count(device);
  typename Gemm::Arguments args{
      cutlass::gemm::GemmUniversalMode::kGemm,
      {static_cast<int>(p.m), static_cast<int>(p.n), static_cast<int>(p.k), p.groups},
      {reinterpret_cast<const cutlass::bfloat16_t*>(p.x), stride_x,
       reinterpret_cast<const cutlass::bfloat16_t*>(p.w), stride_w},
      {{}, nullptr, stride_y, static_cast<ElementD*>(p.y), stride_y},
      hw};
  if constexpr (!kRound) {
    args.epilogue.thread.alpha = 1.0f;
    args.epilogue.thread.beta = 0.0f;
  }
  Gemm gemm;
  if (cutlass::Status s = gemm.can_implement(args); s != cutlass::Status::kSuccess) {
    return absl::InvalidArgumentError(absl::StrCat(kWhat, ": CUTLASS cannot run m ", p.m, " n ",
                                                   p.n, " k ", p.k, ": ", CutlassError(s)));
  }
  if (Gemm::get_workspace_size(args) != 0) {  // data-parallel tiles need none
    return absl::InternalError(absl::StrCat(kWhat, ": CUTLASS asks for a workspace"));
  }
  if (cutlass::Status s = gemm.initialize(args, nullptr, stream); s != cutlass::Status::kSuccess) {
    return absl::InternalError(absl::StrCat(kWhat, ": initialize: ", CutlassError(s)));
  }
  if (cutlass::Status s = gemm.run(stream); s != cutlass::Status::kSuccess) {
    return absl::InternalError(absl::StrCat(kWhat, ": run: ", CutlassError(s), " (",
                                            cudaGetErrorString(cudaGetLastError()), ")"));
  }
  if (cudaError_t err = cudaGetLastError(); err != cudaSuccess) {
    return absl::InternalError(absl::StrCat(kWhat, ": launch: ", cudaGetErrorString(err)));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Bf16GemmCutlass(const Bf16GemmParams& p, cudaStream_t stream) {
  if (absl::Status s = CheckBf16GemmParams(p); !s.ok()) return s;
  if (!Bf16GemmCutlassTakes(p)) {
    return absl::InvalidArgumentError(
        absl::StrCat(kWhat,
                     ": takes bf16 w, no split, row_role or y_codes, fp32 or bf16 output and "
                     "16-byte rows (Bf16GemmCutlassTakes)"));
  }
  if (p.m > INT32_MAX || p.n > INT32_MAX || p.k > INT32_MAX) {
    return absl::InvalidArgumentError(absl::StrCat(kWhat, ": m, n or k past 2^31"));
  }
  int device = 0, major = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess) {
    return absl::InternalError(absl::StrCat(kWhat, ": no device"));
  }
  if (major != 9) return absl::UnimplementedError(absl::StrCat(kWhat, ": built for sm_90a only"));
  int tile_n = p.cutlass_tile_n == 0 ? 256 : p.cutlass_tile_n;
  if (tile_n == -1) {
    int sms = 0;
    if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) {
      return absl::InternalError(absl::StrCat(kWhat, ": no SM count"));
    }
    tile_n = Bf16GemmCutlassTileN(p.m, p.n, p.groups, sms);
  }
  if (tile_n == 128) {
    if (p.output == Fp8GemmOutput::kBf16) return Run<cutlass::bfloat16_t, false, 128>(p, stream);
    if (p.output == Fp8GemmOutput::kF32RoundedBf16) return Run<float, true, 128>(p, stream);
    return Run<float, false, 128>(p, stream);
  }
  if (p.output == Fp8GemmOutput::kBf16) return Run<cutlass::bfloat16_t>(p, stream);
  if (p.output == Fp8GemmOutput::kF32RoundedBf16) return Run<float, true>(p, stream);
  return Run<float>(p, stream);
}

}  // namespace weir::kernels::cuda::dense
