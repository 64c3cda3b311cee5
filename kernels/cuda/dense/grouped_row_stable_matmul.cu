#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/dense/fake_quant.h"
#include "kernels/cuda/dense/grouped_row_stable_matmul.cuh"
#include "kernels/cuda/dense/grouped_row_stable_matmul.h"
#include "kernels/cuda/dense/matmul_params.h"
#include "kernels/cuda/launch_status.h"

namespace weir::kernels::cuda::dense {
namespace {

constexpr int64_t kMaxDim = int64_t{1} << 31;
constexpr int64_t kMaxGridYZ = 65535;
// Grid y (column tiles of 32 at the narrowest) is limited to 65535.
constexpr int64_t kMaxOut = kMaxGridYZ * 32;
// Tile choice by mean group size, as RowStableMatmul chooses by rows (the
// 64 x 64 register tile of its many-rows path is not used here).
constexpr int64_t kSmallRows = 4;
constexpr int64_t kMediumRows = 16;

absl::Status Check(const GroupedMatmulParams& p) {
  if (p.rows <= 0 || p.out <= 0 || p.in <= 0 || p.rows >= kMaxDim || p.out >= kMaxDim ||
      p.in >= kMaxDim || p.num_groups <= 0 || p.num_groups > kMaxGridYZ ||
      p.max_group_rows < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("RowStableGroupedMatmul: bad shape rows ", p.rows, " out ", p.out, " in ",
                     p.in, " num_groups ", p.num_groups, " max_group_rows ", p.max_group_rows));
  }
  if (p.out > kMaxOut) {
    return absl::InvalidArgumentError(
        absl::StrCat("RowStableGroupedMatmul: out ", p.out, " too large for the launch grid"));
  }
  if (p.x == nullptr || p.group_offsets == nullptr || p.y == nullptr) {
    return absl::InvalidArgumentError("RowStableGroupedMatmul: null x, group_offsets or y");
  }
  const bool mxfp4 = p.w_mxfp4 != nullptr || p.w_mxfp4_scales != nullptr;
  if (mxfp4 == (p.w != nullptr)) {
    return absl::InvalidArgumentError(
        "RowStableGroupedMatmul: exactly one of w and the MXFP4 weights must be set");
  }
  if (mxfp4 && (p.w_mxfp4 == nullptr || p.w_mxfp4_scales == nullptr)) {
    return absl::InvalidArgumentError(
        "RowStableGroupedMatmul: MXFP4 weights need both w_mxfp4 and w_mxfp4_scales");
  }
  if (mxfp4 && p.in % 32 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "RowStableGroupedMatmul: MXFP4 weights need in (", p.in, ") a multiple of 32"));
  }
  if (p.fp8_activation && (p.in % 32 != 0 || p.act_scratch == nullptr)) {
    return absl::InvalidArgumentError(
        absl::StrCat("RowStableGroupedMatmul: the FP8 activation needs in (", p.in,
                     ") a multiple of 32 and act_scratch"));
  }
  const int64_t y_floats = p.rows * p.out;
  const int64_t x_floats = p.rows * p.in;
  const float* scratch = p.fp8_activation ? p.act_scratch : nullptr;
  if (FloatRangesOverlap(p.y, y_floats, p.x, x_floats) || FloatRangesOverlap(p.y, y_floats, scratch, x_floats) ||
      FloatRangesOverlap(scratch, x_floats, p.x, x_floats)) {
    return absl::InvalidArgumentError(
        "RowStableGroupedMatmul: y, x and act_scratch must not overlap");
  }
  return absl::OkStatus();
}

template <int kThreads, int kRowGroups, int kTm, int kTn, int kBk, typename GroupWeights>
void Launch(const float* x, GroupWeights weights, const GroupedMatmulParams& p,
            int64_t grid_rows, cudaStream_t stream) {
  constexpr int kBm = kRowGroups * kTm;
  constexpr int kBn = kThreads / 4 / kRowGroups * kTn;
  const dim3 grid(static_cast<unsigned>((grid_rows + kBm - 1) / kBm),
                  static_cast<unsigned>((p.out + kBn - 1) / kBn),
                  static_cast<unsigned>(p.num_groups));
  RowStableGroupedMatmulKernel<kThreads, kRowGroups, kTm, kTn, kBk>
      <<<grid, kThreads, 0, stream>>>(x, p.group_offsets, weights, p.y, p.rows, p.out, p.in);
}

// Picks the tile shape from the mean group size (every shape gives the same
// bits) and launches.
template <typename GroupWeights>
void LaunchForSize(const float* x, GroupWeights weights, const GroupedMatmulParams& p,
                   cudaStream_t stream) {
  // Row tiles a group may need: its size is at most rows and at most the hint.
  const int64_t grid_rows = p.max_group_rows > 0 ? std::min(p.rows, p.max_group_rows) : p.rows;
  const int64_t mean_rows = std::min(grid_rows, (p.rows + p.num_groups - 1) / p.num_groups);
  if (mean_rows <= kSmallRows) {
    Launch<128, 1, 4, 1, 128>(x, weights, p, grid_rows, stream);
  } else if (mean_rows <= kMediumRows) {
    Launch<128, 1, 8, 1, 128>(x, weights, p, grid_rows, stream);
  } else {
    Launch<256, 4, 4, 4, 32>(x, weights, p, grid_rows, stream);
  }
}

}  // namespace

bool SupportsRowStableGroupedMatmul(const GroupedMatmulParams& p) { return Check(p).ok(); }

absl::Status RowStableGroupedMatmul(const GroupedMatmulParams& p, cudaStream_t stream) {
  if (absl::Status s = Check(p); !s.ok()) return s;
  const float* x = nullptr;
  if (absl::Status s = Fp8ActivationInput(p.x, p.act_scratch, p.rows * p.in, p.fp8_activation,
                                          &x, stream);
      !s.ok()) {
    return s;
  }
  if (p.w != nullptr) {
    LaunchForSize(x, Fp32GroupWeights{p.w}, p, stream);
  } else {
    LaunchForSize(x, Mxfp4GroupWeights{p.w_mxfp4, p.w_mxfp4_scales}, p, stream);
  }
  return LaunchStatus("RowStableGroupedMatmul");
}

}  // namespace weir::kernels::cuda::dense
