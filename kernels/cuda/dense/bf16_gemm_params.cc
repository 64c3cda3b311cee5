#include "kernels/cuda/dense/bf16_gemm_params.h"

#include <algorithm>
#include <cstdint>

#include "absl/strings/str_cat.h"

namespace weir::kernels::cuda::dense {
namespace {

constexpr int64_t kMaxGridYZ = 65535;

bool AlignedTo(const void* p, uintptr_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

}  // namespace

int64_t Bf16GemmSharedBytes(const Fp8GemmTileShape& s, bool w_codes) {
  if (w_codes) {  // one W tile; a ring of X tiles and of code tiles (64 bytes a row)
    return static_cast<int64_t>(s.block_n) * kFp8GemmStageK +
           static_cast<int64_t>(s.block_m * kFp8GemmStageK + s.block_n * kBf16GemmStageK) *
               s.stages;
  }
  return static_cast<int64_t>(s.block_n + s.block_m) * kFp8GemmStageK * s.stages;
}

int64_t Bf16GemmWeightScaleBytes(int64_t n, int64_t k) { return (n + 31) / 32 * ((k + 31) / 32); }

int64_t Bf16GemmSplitScratchFloats(const Bf16GemmParams& p) {
  if (p.k_splits <= 1) return 0;
  return int64_t{p.groups} * p.k_splits * p.m * p.n;
}

int ChooseBf16GemmSplits(int64_t n, int64_t k, int groups) {
  if (n <= 0 || k <= 0 || groups <= 0) return 1;
  const int64_t ctas = (n + 31) / 32 * groups;
  if (ctas >= kFp8GemmSplitTargetCtas) return 1;
  const int64_t num_kt = (k + kBf16GemmStageK - 1) / kBf16GemmStageK;
  const int64_t wanted = (kFp8GemmSplitTargetCtas + ctas - 1) / ctas;
  const int64_t most = std::min<int64_t>(kFp8GemmMaxSplits, num_kt / 4);
  return static_cast<int>(std::max<int64_t>(1, std::min(wanted, most)));
}

Fp8GemmTile ResolveBf16GemmTile(const Bf16GemmParams& p) {
  if (p.tile != Fp8GemmTile::kAuto) return p.tile;
  const Fp8GemmTile tile = ChooseFp8GemmTile(p.m, p.n);
  return tile == Fp8GemmTile::kN128M128 && p.w_codes == nullptr ? Fp8GemmTile::kN128M128Ws : tile;
}

bool Bf16GemmMakesFp8(const Bf16GemmParams& p) {
  const int64_t ldy = p.y_row_stride != 0 ? p.y_row_stride : p.n;
  const int64_t gs = p.y_group_stride != 0 ? p.y_group_stride : p.m * ldy;
  return p.k_splits > 1 && ResolveBf16GemmTile(p) != Fp8GemmTile::kN128M128Ws &&
         p.output != Fp8GemmOutput::kBf16 && p.n % 32 == 0 && ldy % 32 == 0 && gs % 32 == 0;
}

bool Bf16GemmGroupsApart(const Bf16GemmParams& p) {
  const int64_t ldy = p.y_row_stride != 0 ? p.y_row_stride : p.n;
  const int64_t gs = p.y_group_stride != 0 ? p.y_group_stride : p.m * ldy;
  if (p.groups <= 1) return true;
  // Each group's rows one after another (a group's last row ends before the
  // next group starts), or every group side by side within each row.
  const bool stacked = gs >= (p.m - 1) * ldy + p.n;
  const bool side_by_side = gs >= p.n && (p.groups - 1) * gs + p.n <= ldy;
  return stacked || side_by_side;
}

bool Bf16GemmCutlassTakes(const Bf16GemmParams& p) {
  if (p.w == nullptr || p.w_codes != nullptr || p.k_splits > 1 || p.row_role != nullptr ||
      p.y_codes != nullptr) {
    return false;
  }
  const int64_t y_bytes = p.output == Fp8GemmOutput::kBf16 ? 2 : 4;
  const int64_t ldy = p.y_row_stride != 0 ? p.y_row_stride : p.n;
  const int64_t y_group = p.y_group_stride != 0 ? p.y_group_stride : p.m * ldy;
  const int64_t x_group = p.x_group_stride != 0 ? p.x_group_stride : p.m * p.k;
  const int64_t w_group = p.w_group_stride != 0 ? p.w_group_stride : p.n * p.k;
  const bool grouped = p.groups > 1;
  return p.k % 8 == 0 && (!grouped || (x_group % 8 == 0 && w_group % 8 == 0)) &&
         (ldy * y_bytes) % 16 == 0 && (!grouped || (y_group * y_bytes) % 16 == 0) &&
         reinterpret_cast<uintptr_t>(p.y) % 16 == 0;
}

int Bf16GemmCutlassTileN(int64_t m, int64_t n, int groups, int sms) {
  if (m <= 0 || n <= 0 || groups <= 0 || sms <= 0) return 256;
  const auto waves = [&](int64_t tile_n) {
    const int64_t tiles = (m + 127) / 128 * ((n + tile_n - 1) / tile_n) * groups;
    return (tiles + sms - 1) / sms;
  };
  return static_cast<double>(waves(128)) * kBf16CutlassTile128Cost < static_cast<double>(waves(256))
             ? 128
             : 256;
}

absl::Status CheckBf16GemmParams(const Bf16GemmParams& p) {
  if (p.x == nullptr || (p.w == nullptr) == (p.w_codes == nullptr) || p.y == nullptr) {
    return absl::InvalidArgumentError("Bf16Gemm: null pointer (or both w and w_codes)");
  }
  if (p.w_codes != nullptr) {
    if (p.w_scales == nullptr || p.k % 32 != 0 || !AlignedTo(p.w_codes, 16) ||
        p.w_group_stride % 16 != 0 || p.w_scales_group_stride < 0 ||
        (p.groups > 1 && p.w_scales_group_stride != 0 &&
         p.w_scales_group_stride < Bf16GemmWeightScaleBytes(p.n, p.k))) {
      return absl::InvalidArgumentError(
          "Bf16Gemm: w_codes needs w_scales, k a multiple of 32, 16-byte aligned codes, a "
          "code group stride multiple of 16 and a scale group stride of at least a group's "
          "scales");
    }
    if (p.tile == Fp8GemmTile::kN128M128Ws) {
      return absl::InvalidArgumentError("Bf16Gemm: w_codes runs on the mma tiles only");
    }
  }
  if (p.m <= 0 || p.n <= 0 || p.k <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("Bf16Gemm: non-positive shape m ", p.m, " n ", p.n, " k ", p.k));
  }
  if (p.groups <= 0 || p.groups > kMaxGridYZ) {
    return absl::InvalidArgumentError(
        absl::StrCat("Bf16Gemm: groups ", p.groups, " outside [1, 65535]"));
  }
  if (p.k % 8 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("Bf16Gemm: k ", p.k, " is not a multiple of 8"));
  }
  if (p.k > (int64_t{1} << 30) || p.n > (int64_t{1} << 30) || p.m > (int64_t{1} << 30)) {
    return absl::InvalidArgumentError("Bf16Gemm: m, n or k above 2^30");
  }
  if (p.x_group_stride < 0 || p.w_group_stride < 0 || p.y_group_stride < 0) {
    return absl::InvalidArgumentError("Bf16Gemm: negative group stride");
  }
  if (p.y_row_stride != 0 && (p.y_row_stride < p.n || p.y_row_stride > (int64_t{1} << 40))) {
    return absl::InvalidArgumentError(absl::StrCat("Bf16Gemm: y row stride ", p.y_row_stride,
                                                   " below n ", p.n, " or above 2^40"));
  }
  if (p.groups > 1) {
    if ((p.x_group_stride != 0 && p.x_group_stride < p.m * p.k) ||
        (p.w_group_stride != 0 && p.w_group_stride < p.n * p.k)) {
      return absl::InvalidArgumentError("Bf16Gemm: a group stride is below its group's size");
    }
    if (p.y_group_stride != 0 && !Bf16GemmGroupsApart(p)) {
      return absl::InvalidArgumentError(
          absl::StrCat("Bf16Gemm: y group stride ", p.y_group_stride, " with row stride ",
                       p.y_row_stride, " makes groups of ", p.m, " x ", p.n, " overlap"));
    }
    if (p.x_group_stride % 8 != 0 || p.w_group_stride % 8 != 0) {
      return absl::InvalidArgumentError(
          "Bf16Gemm: x and w group strides must be multiples of 8 (16-byte rows)");
    }
  }
  if (!AlignedTo(p.x, 16) || (p.w != nullptr && !AlignedTo(p.w, 16))) {
    return absl::InvalidArgumentError("Bf16Gemm: x and w must be 16-byte aligned");
  }
  if (!AlignedTo(p.y, Fp8GemmOutputBytes(p.output))) {
    return absl::InvalidArgumentError("Bf16Gemm: y is not aligned to its element");
  }
  const int64_t num_kt = (p.k + kBf16GemmStageK - 1) / kBf16GemmStageK;
  if (p.k_splits < 1 || p.k_splits > num_kt || int64_t{p.groups} * p.k_splits > kMaxGridYZ) {
    return absl::InvalidArgumentError(absl::StrCat("Bf16Gemm: k_splits ", p.k_splits,
                                                   " outside [1, ", num_kt,
                                                   "] or groups x "
                                                   "k_splits above 65535"));
  }
  if (p.cutlass_tile_n != -1 && p.cutlass_tile_n != 0 && p.cutlass_tile_n != 128 &&
      p.cutlass_tile_n != 256) {
    return absl::InvalidArgumentError(
        absl::StrCat("Bf16Gemm: cutlass_tile_n ", p.cutlass_tile_n, " (-1, 0, 128 or 256)"));
  }
  if (p.k_splits > 1 && p.split_scratch == nullptr) {
    return absl::InvalidArgumentError("Bf16Gemm: k_splits > 1 needs split_scratch");
  }
  if ((p.y_codes == nullptr) != (p.y_scales == nullptr) ||
      (p.y_codes != nullptr && !Bf16GemmMakesFp8(p))) {
    return absl::InvalidArgumentError(
        "Bf16Gemm: y_codes and y_scales go together, with k_splits > 1 on a tile with the "
        "second kernel, fp32 output and n, row and group strides multiples of 32");
  }
  if (p.row_role != nullptr && p.y_codes != nullptr) {
    return absl::InvalidArgumentError(
        "Bf16Gemm: row_role does not go with y_codes (their kernel writes every row)");
  }
  if (!AlignedTo(p.row_role, 4)) {
    return absl::InvalidArgumentError("Bf16Gemm: row_role is not 4-byte aligned");
  }
  const Fp8GemmTile tile = ResolveBf16GemmTile(p);
  const Fp8GemmTileShape shape = ShapeOfFp8GemmTile(tile);
  if (shape.block_m == 0) return absl::InvalidArgumentError("Bf16Gemm: unknown tile");
  if (tile != Fp8GemmTile::kN128M128Ws && Fp8GemmTileIsWgmmaOnly(shape.block_m, shape.warps_m)) {
    return absl::InvalidArgumentError("Bf16Gemm: this tile runs Fp8BlockGemm's wgmma only");
  }
  if ((p.m + shape.block_m - 1) / shape.block_m > kMaxGridYZ) {
    return absl::InvalidArgumentError(
        absl::StrCat("Bf16Gemm: m ", p.m, " exceeds the launch grid of the tile"));
  }
  return absl::OkStatus();
}

}  // namespace weir::kernels::cuda::dense
