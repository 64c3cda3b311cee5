#include "kernels/cuda/dense/fp8_block_gemm_params.h"

#include <algorithm>
#include <cstdint>

#include "absl/strings/str_cat.h"

namespace weir::kernels::cuda::dense {
namespace {

constexpr int64_t kMaxGridY = 65535;

bool AlignedTo(const void* p, uintptr_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

}  // namespace

Fp8GemmTileShape ShapeOfFp8GemmTile(Fp8GemmTile tile) {
  // Decode tiles keep pipelines short so that many CTAs fit on an SM (a
  // 1-warp CTA of 6 stages takes 18 KB: 12 per SM).
  switch (tile) {
    case Fp8GemmTile::kN16M8:
      return {.block_n = 16, .block_m = 8, .warps_n = 1, .warps_m = 1, .stages = 6};
    case Fp8GemmTile::kN16M16:
      return {.block_n = 16, .block_m = 16, .warps_n = 1, .warps_m = 1, .stages = 6};
    case Fp8GemmTile::kN16M32:
      return {.block_n = 16, .block_m = 32, .warps_n = 1, .warps_m = 1, .stages = 5};
    case Fp8GemmTile::kN16M64:
      return {.block_n = 16, .block_m = 64, .warps_n = 1, .warps_m = 1, .stages = 4};
    case Fp8GemmTile::kN16M32W2:
      return {.block_n = 16, .block_m = 32, .warps_n = 1, .warps_m = 2, .stages = 5};
    case Fp8GemmTile::kN16M64W4:
      return {.block_n = 16, .block_m = 64, .warps_n = 1, .warps_m = 4, .stages = 4};
    case Fp8GemmTile::kN32M64W4:
      return {.block_n = 32, .block_m = 64, .warps_n = 1, .warps_m = 4, .stages = 4};
    case Fp8GemmTile::kN64M64W4:
      return {.block_n = 64, .block_m = 64, .warps_n = 2, .warps_m = 2, .stages = 4};
    case Fp8GemmTile::kN32M8:
      return {.block_n = 32, .block_m = 8, .warps_n = 2, .warps_m = 1, .stages = 6};
    case Fp8GemmTile::kN32M16:
      return {.block_n = 32, .block_m = 16, .warps_n = 2, .warps_m = 1, .stages = 6};
    case Fp8GemmTile::kN32M32:
      return {.block_n = 32, .block_m = 32, .warps_n = 2, .warps_m = 1, .stages = 5};
    case Fp8GemmTile::kN32M64:
      return {.block_n = 32, .block_m = 64, .warps_n = 2, .warps_m = 1, .stages = 4};
    case Fp8GemmTile::kN64M64:
      return {.block_n = 64, .block_m = 64, .warps_n = 4, .warps_m = 1, .stages = 6};
    case Fp8GemmTile::kN128M64:
      return {.block_n = 128, .block_m = 64, .warps_n = 8, .warps_m = 1, .stages = 4};
    case Fp8GemmTile::kN128M128:
      return {.block_n = 128, .block_m = 128, .warps_n = 2, .warps_m = 4, .stages = 4};
    case Fp8GemmTile::kN64M8:
      return {.block_n = 64, .block_m = 8, .warps_n = 4, .warps_m = 1, .stages = 6};
    case Fp8GemmTile::kN64M16:
      return {.block_n = 64, .block_m = 16, .warps_n = 4, .warps_m = 1, .stages = 6};
    case Fp8GemmTile::kN64M32:
      return {.block_n = 64, .block_m = 32, .warps_n = 4, .warps_m = 1, .stages = 5};
    case Fp8GemmTile::kN64M8S4:
      return {.block_n = 64, .block_m = 8, .warps_n = 4, .warps_m = 1, .stages = 4};
    case Fp8GemmTile::kN64M8S3:
      return {.block_n = 64, .block_m = 8, .warps_n = 4, .warps_m = 1, .stages = 3};
    case Fp8GemmTile::kN128M128Wg:
      return {.block_n = 128, .block_m = 128, .warps_n = 8, .warps_m = 1, .stages = 4};
    case Fp8GemmTile::kN128M128Ws:  // the consumer warps (a producer warpgroup besides)
      return {.block_n = 128, .block_m = 128, .warps_n = 8, .warps_m = 1, .stages = 4};
    case Fp8GemmTile::kAuto:
      break;
  }
  return {};
}

Fp8GemmTile ChooseFp8GemmTile(int64_t m, int64_t n, Fp8GemmMath math) {
  if (Fp8GemmMathIsWgmma(math)) {  // not tuned yet: one warpgroup over 64 W rows
    if (m <= 8) return Fp8GemmTile::kN64M8;
    if (m <= 16) return Fp8GemmTile::kN64M16;
    if (m <= 32) return Fp8GemmTile::kN64M32;
    if (m <= 256) return Fp8GemmTile::kN64M64;
    return Fp8GemmTile::kN128M128Wg;
  }
  // From fp8_gemm_bench's tile sweep on an H200 (README "Measurements"). Up to
  // 64 rows the CTA covers all of X, so W is read once; wide tiles win only
  // when n is large enough to fill the GPU anyway (they read X fewer times).
  // Up to 8 rows: 4 warps over 64 W rows (one warpgroup's tile; 2026-12-04,
  // EP8 slice at batch 1: 12.59 -> 12.32 ms against kN32M8, the same splits)
  // with a 3-slot ring: 8 CTAs an SM by shared memory (6 by registers)
  // instead of 4, and a split CTA walks only 4 - 10 stages anyway
  // (fp8_gemm_bench, decoder splits, m = 8: wo_b 24.8 -> 20.1 us, shared.w13
  // 18.3 -> 15.0, main_proj 37.4 -> 29.2 against kN64M8's 6 slots).
  if (m <= 8) return Fp8GemmTile::kN64M8S3;
  if (m <= 16) return Fp8GemmTile::kN32M16;
  // 17 - 64 rows (fp8_gemm_bench, 2026-12-02, with the split the decoder runs
  // each weight with): the one-warp n16 tiles left the SMs at 7% occupancy
  // (ncu: 4 - 5 one-warp CTAs an SM by shared memory); 4 warps over 2 x 2
  // blocks of 32 W rows x 32 X rows are fastest on every V4.1 shape but the
  // narrowest (n = 512), where the n16 tiles with X rows over 2 / 4 warps win.
  if (m <= 32) return n >= 1024 ? Fp8GemmTile::kN32M32 : Fp8GemmTile::kN16M32W2;
  if (m <= 64) return n >= 1024 ? Fp8GemmTile::kN64M64W4 : Fp8GemmTile::kN16M64W4;
  if (m <= 256) return Fp8GemmTile::kN64M64;
  return Fp8GemmTile::kN128M128;
}

bool Fp8GemmWsApplies(const Fp8BlockGemmParams& p) {
  if (p.k % kFp8GemmStageK != 0) return false;
  if (!AlignedTo(p.x_scales, 4) || !AlignedTo(p.w_scales, 4)) return false;
  // Packed group strides are multiples of k / 32, itself a multiple of 4 here.
  return p.groups == 1 || (p.x_scales_group_stride % 4 == 0 && p.w_scales_group_stride % 4 == 0);
}

bool Fp8GemmRopeApplies(const Fp8BlockGemmParams& p) {
  return p.rope.cos_sin != nullptr && p.k_splits > 1 && p.output != Fp8GemmOutput::kBf16 &&
         p.groups == 1 && p.group_offsets == nullptr &&
         ResolveFp8GemmTile(p) != Fp8GemmTile::kN128M128Ws;
}

Fp8GemmTile ResolveFp8GemmTile(const Fp8BlockGemmParams& p) {
  if (p.tile != Fp8GemmTile::kAuto) return p.tile;
  const Fp8GemmTile tile = ChooseFp8GemmTile(p.m, p.n, p.math);
  // Above 256 rows (the 128 x 128 tiles' range) the warp-specialized tile
  // runs the same bits.
  if ((tile == Fp8GemmTile::kN128M128 || tile == Fp8GemmTile::kN128M128Wg) && Fp8GemmWsApplies(p)) {
    return Fp8GemmTile::kN128M128Ws;
  }
  return tile;
}

int64_t Fp8GemmSharedBytes(const Fp8GemmTileShape& s) {
  const int64_t groups = (s.block_n + kFp8GemmScaleBlock - 1) / kFp8GemmScaleBlock;
  const int64_t per_stage =
      static_cast<int64_t>(s.block_n + s.block_m) * kFp8GemmStageK + (groups + s.block_m) * 4;
  // After the ring, each warp's scratch of one stage's X scales as fp32.
  const int64_t scratch =
      int64_t{s.warps_n} * s.block_m * (kFp8GemmStageK / kFp8GemmScaleBlock) * 4;
  return Fp8GemmScaleScratchOffset(per_stage * s.stages) + scratch;
}

int64_t Fp8GemmSplitScratchFloats(const Fp8BlockGemmParams& p) {
  if (p.k_splits <= 1) return 0;
  return int64_t{p.groups} * p.k_splits * p.m * p.n;
}

int64_t Fp8GemmSplitCounters(const Fp8BlockGemmParams& p) {
  if (p.k_splits <= 1) return 0;
  const Fp8GemmTileShape shape = ShapeOfFp8GemmTile(ResolveFp8GemmTile(p));
  return (p.n + shape.block_n - 1) / shape.block_n * ((p.m + shape.block_m - 1) / shape.block_m) *
         p.groups;
}

int ChooseFp8GemmSplits(int64_t n, int64_t k, int groups, int64_t target_ctas, int min_stages) {
  if (n <= 0 || k <= 0 || groups <= 0 || target_ctas <= 0 || min_stages <= 0) return 1;
  const int64_t ctas = (n + 31) / 32 * groups;
  if (ctas >= target_ctas) return 1;
  const int64_t num_kt = (k + kFp8GemmStageK - 1) / kFp8GemmStageK;
  const int64_t wanted = (target_ctas + ctas - 1) / ctas;
  const int64_t most = std::min<int64_t>(kFp8GemmMaxSplits, num_kt / min_stages);
  return static_cast<int>(std::max<int64_t>(1, std::min(wanted, most)));
}

absl::Status CheckFp8F16PanelParams(const Fp8F16PanelParams& p) {
  if (p.codes == nullptr || p.out == nullptr) {
    return absl::InvalidArgumentError("WidenFp8ToF16Panel: null pointer");
  }
  if (p.rows < 0 || p.k <= 0 || p.k % 16 != 0 || p.groups < 1) {
    return absl::InvalidArgumentError(absl::StrCat("WidenFp8ToF16Panel: rows ", p.rows, ", k ", p.k,
                                                   " (a positive multiple of 16), groups ",
                                                   p.groups, " (at least 1)"));
  }
  if (!AlignedTo(p.codes, 16) || !AlignedTo(p.out, 16)) {
    return absl::InvalidArgumentError("WidenFp8ToF16Panel: codes and out must be 16-byte aligned");
  }
  if (p.code_group_stride != 0 &&
      (p.code_group_stride < p.rows * p.k || p.code_group_stride % 16 != 0)) {
    return absl::InvalidArgumentError(absl::StrCat("WidenFp8ToF16Panel: code group stride ",
                                                   p.code_group_stride,
                                                   " is below rows x k or not a multiple of 16"));
  }
  if (p.scales != nullptr && p.k % kFp8GemmScaleBlock != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("WidenFp8ToF16Panel: k ", p.k, " with scales is not a multiple of 32"));
  }
  if (p.scales != nullptr && p.scale_group_stride != 0 &&
      p.scale_group_stride < p.rows * (p.k / kFp8GemmScaleBlock)) {
    return absl::InvalidArgumentError(absl::StrCat("WidenFp8ToF16Panel: scale group stride ",
                                                   p.scale_group_stride,
                                                   " is below rows x k / 32"));
  }
  if (p.scales == nullptr && p.scale_group_stride != 0) {
    return absl::InvalidArgumentError("WidenFp8ToF16Panel: a scale group stride without scales");
  }
  return absl::OkStatus();
}

absl::Status CheckFp8BlockGemmParams(const Fp8BlockGemmParams& p) {
  if (p.x == nullptr || p.x_scales == nullptr || p.w == nullptr || p.w_scales == nullptr ||
      p.y == nullptr) {
    return absl::InvalidArgumentError("Fp8BlockGemm: null pointer");
  }
  if (p.m <= 0 || p.n <= 0 || p.k <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("Fp8BlockGemm: non-positive shape m ", p.m, " n ", p.n, " k ", p.k));
  }
  if (p.k % kFp8GemmScaleBlock != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("Fp8BlockGemm: k ", p.k, " is not a multiple of 32"));
  }
  if (p.k > (int64_t{1} << 30) || p.n > (int64_t{1} << 30)) {
    return absl::InvalidArgumentError("Fp8BlockGemm: n or k above 2^30");
  }
  if (!AlignedTo(p.x, 16) || !AlignedTo(p.w, 16)) {
    return absl::InvalidArgumentError("Fp8BlockGemm: x and w must be 16-byte aligned");
  }
  if (!AlignedTo(p.y, Fp8GemmOutputBytes(p.output))) {
    return absl::InvalidArgumentError("Fp8BlockGemm: y is not aligned to its element");
  }
  if (p.groups < 1 || p.groups > kMaxGridY) {
    return absl::InvalidArgumentError(
        absl::StrCat("Fp8BlockGemm: groups ", p.groups, " outside [1, 65535]"));
  }
  if (p.x_shared && (p.x_group_stride != 0 || p.x_scales_group_stride != 0)) {
    return absl::InvalidArgumentError(
        "Fp8BlockGemm: x_shared takes no x group strides (every group reads group 0's x)");
  }
  if (p.groups > 1) {
    const int64_t n_groups = (p.n + 31) / 32;
    auto bad = [](int64_t stride, int64_t size, int64_t align) {
      return stride < 0 || (stride != 0 && stride < size) || stride % align != 0;
    };
    if (bad(p.x_group_stride, p.m * p.k, 16) || bad(p.w_group_stride, p.n * p.k, 16) ||
        bad(p.x_scales_group_stride, p.m * (p.k / 32), 4) ||
        bad(p.w_scales_group_stride, n_groups * (p.k / 32), 4) ||
        bad(p.y_group_stride, p.m * p.n, 1)) {
      return absl::InvalidArgumentError(
          "Fp8BlockGemm: a group stride is negative, below its group's size, or misaligned "
          "(codes 16 bytes, scales 4)");
    }
  }
  const int64_t num_kt = (p.k + kFp8GemmStageK - 1) / kFp8GemmStageK;
  if (p.k_splits < 1 || p.k_splits > num_kt ||
      int64_t{p.k_splits} * p.groups > kMaxGridY) {
    return absl::InvalidArgumentError(
        absl::StrCat("Fp8BlockGemm: k_splits ", p.k_splits, " outside [1, ", num_kt,
                     "] (stages of 128 of K) or groups x k_splits above 65535"));
  }
  if (p.group_offsets != nullptr &&
      (p.x_shared || p.x_group_stride != 0 || p.x_scales_group_stride != 0 ||
       p.y_group_stride != 0 || p.k_splits != 1)) {
    return absl::InvalidArgumentError(
        "Fp8BlockGemm: group_offsets takes its rows from the offsets: no x / y strides, no "
        "x_shared, no split");
  }
  if (p.rope.cos_sin != nullptr &&
      (p.rope.positions == nullptr || p.rope.cos_sin_rows <= 0 || p.rope.dim <= 0 ||
       p.rope.dim % 2 != 0 || p.rope.dim > p.rope.head_dim || p.n % p.rope.head_dim != 0)) {
    return absl::InvalidArgumentError(
        "Fp8BlockGemm: a RoPE needs positions, a table of rows > 0 and an even dim in (0, "
        "head_dim] with n a multiple of head_dim");
  }
  if (p.k_splits > 1 && p.split_scratch == nullptr) {
    return absl::InvalidArgumentError("Fp8BlockGemm: k_splits > 1 needs split_scratch");
  }
  if (p.math != Fp8GemmMath::kMmaF16 && p.math != Fp8GemmMath::kWgmma &&
      p.math != Fp8GemmMath::kWgmmaF16) {
    return absl::InvalidArgumentError("Fp8BlockGemm: unknown math");
  }
  const Fp8GemmTile tile = ResolveFp8GemmTile(p);
  const Fp8GemmTileShape shape = ShapeOfFp8GemmTile(tile);
  if (shape.block_m == 0) return absl::InvalidArgumentError("Fp8BlockGemm: unknown tile");
  if (tile == Fp8GemmTile::kN128M128Ws) {
    if (!Fp8GemmWsApplies(p)) {
      return absl::InvalidArgumentError(
          "Fp8BlockGemm: kN128M128Ws needs k a multiple of 128 and 4-byte aligned scales");
    }
    if (!AlignedTo(p.x_f16, 16)) {
      return absl::InvalidArgumentError("Fp8BlockGemm: x_f16 must be 16-byte aligned");
    }
    if (p.x_f16_scaled && (p.x_f16 == nullptr || p.ws_halves)) {
      return absl::InvalidArgumentError(
          "Fp8BlockGemm: x_f16_scaled needs an x_f16 panel and no ws_halves");
    }
    // With group offsets the grid's rows are ceil(m / 128) + groups items.
    if ((p.m + shape.block_m - 1) / shape.block_m + (p.group_offsets != nullptr ? p.groups : 0) >
        kMaxGridY) {
      return absl::InvalidArgumentError(
          absl::StrCat("Fp8BlockGemm: m ", p.m, " exceeds the launch grid of the tile"));
    }
    return absl::OkStatus();
  }
  if (Fp8GemmMathIsWgmma(p.math) && !Fp8GemmTileRunsWgmma(shape)) {
    return absl::InvalidArgumentError(
        "Fp8BlockGemm: wgmma needs a tile of whole warpgroups, each warp 16 W rows and every "
        "X row (kN64M8, kN64M16, kN64M32, kN64M64, kN128M64, kN128M128Wg)");
  }
  if (p.math == Fp8GemmMath::kMmaF16 && Fp8GemmTileIsWgmmaOnly(shape.block_m, shape.warps_m)) {
    return absl::InvalidArgumentError("Fp8BlockGemm: this tile runs wgmma only");
  }
  if ((p.m + shape.block_m - 1) / shape.block_m > kMaxGridY) {
    return absl::InvalidArgumentError(
        absl::StrCat("Fp8BlockGemm: m ", p.m, " exceeds the launch grid of the tile"));
  }
  return absl::OkStatus();
}

}  // namespace weir::kernels::cuda::dense
