#include "kernels/cuda/moe/mxfp4_grouped_gemm_params.h"

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "kernels/common/numeric_formats.h"

namespace weir::kernels::cuda {
namespace {

constexpr int64_t kMaxGridX = 0x7FFFFFFF;
constexpr int64_t kMaxGridY = 65535;

bool AlignedTo(const void* p, uintptr_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

// The checks both products share; `what` names the op in messages.
absl::Status CheckCommon(const char* what, const uint8_t* x, const uint8_t* x_scales,
                         const int64_t* offsets, int64_t rows, int64_t n, int64_t k,
                         int num_experts, Mxfp4GroupedTile tile, bool gated, Mxfp4GemmMath math) {
  if (x == nullptr || x_scales == nullptr || offsets == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": null pointer"));
  }
  if (rows < 0 || n <= 0 || k <= 0 || num_experts <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": bad shape rows ", rows, " n ", n, " k ",
                                                   k, " experts ", num_experts));
  }
  if (k % kMxfp4GemmStageK != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": k ", k, " is not a multiple of ", kMxfp4GemmStageK));
  }
  if (k > (int64_t{1} << 30) || n > (int64_t{1} << 30) || rows > (int64_t{1} << 31)) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": n, k or rows too large"));
  }
  if (!AlignedTo(x, 16) || !AlignedTo(x_scales, 8)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": x must be 16-byte and x_scales 8-byte aligned"));
  }
  if (num_experts > kMaxGridY) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": more than 65535 experts"));
  }
  if (tile != Mxfp4GroupedTile::kAuto) {
    const Mxfp4GroupedTileShape shape = ShapeOfMxfp4GroupedTile(tile);
    if (shape.warps == 0) return absl::InvalidArgumentError(absl::StrCat(what, ": unknown tile"));
    if (gated && shape.warps % 4 != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": the gate/up product needs a tile of 4 or 8 warps"));
    }
    if (math == Mxfp4GemmMath::kWgmmaF16 && tile == Mxfp4GroupedTile::kW8M128) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": kW8M128's f16 X tile does not fit in shared memory (wgmma f16)"));
    }
    if (Mxfp4MathIsWgmma(math) && shape.warps % 4 != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": wgmma needs a tile of 4 or 8 warps (whole warpgroups)"));
    }
  }
  if ((n + 15) / 16 > kMaxGridX) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": n too large for the grid"));
  }
  return absl::OkStatus();
}

}  // namespace

Mxfp4GroupedTileShape ShapeOfMxfp4GroupedTile(Mxfp4GroupedTile tile) {
  // Decode tiles keep several stages in flight per warp (the grid is small:
  // only the hit experts' CTAs do work); a stage of kW4M8 is 10.8 KB.
  switch (tile) {
    case Mxfp4GroupedTile::kW2M8:
      return {.warps = 2, .block_m = 8, .stages = 6};
    case Mxfp4GroupedTile::kW2M32:
      return {.warps = 2, .block_m = 32, .stages = 4};
    case Mxfp4GroupedTile::kW4M8:
      return {.warps = 4, .block_m = 8, .stages = 6};
    case Mxfp4GroupedTile::kW4M8S4:
      return {.warps = 4, .block_m = 8, .stages = 4};
    case Mxfp4GroupedTile::kW4M8S3:
      return {.warps = 4, .block_m = 8, .stages = 3};
    case Mxfp4GroupedTile::kW4M16S4:
      return {.warps = 4, .block_m = 16, .stages = 4};
    case Mxfp4GroupedTile::kW4M16S3:
      return {.warps = 4, .block_m = 16, .stages = 3};
    case Mxfp4GroupedTile::kW4M32:
      return {.warps = 4, .block_m = 32, .stages = 4};
    case Mxfp4GroupedTile::kW8M64:
      return {.warps = 8, .block_m = 64, .stages = 3};
    case Mxfp4GroupedTile::kW8M128:
      return {.warps = 8, .block_m = 128, .stages = 3};
    case Mxfp4GroupedTile::kAuto:
      break;
  }
  return {};
}

const char* Mxfp4GroupedTileName(Mxfp4GroupedTile tile) {
  switch (tile) {
    case Mxfp4GroupedTile::kW2M8:
      return "w2m8";
    case Mxfp4GroupedTile::kW2M32:
      return "w2m32";
    case Mxfp4GroupedTile::kW4M8:
      return "w4m8";
    case Mxfp4GroupedTile::kW4M8S4:
      return "w4m8s4";
    case Mxfp4GroupedTile::kW4M8S3:
      return "w4m8s3";
    case Mxfp4GroupedTile::kW4M16S4:
      return "w4m16s4";
    case Mxfp4GroupedTile::kW4M16S3:
      return "w4m16s3";
    case Mxfp4GroupedTile::kW4M32:
      return "w4m32";
    case Mxfp4GroupedTile::kW8M64:
      return "w8m64";
    case Mxfp4GroupedTile::kW8M128:
      return "w8m128";
    case Mxfp4GroupedTile::kAuto:
      return "auto";
  }
  return "?";
}

std::optional<Mxfp4GroupedTile> Mxfp4GroupedTileByName(std::string_view name) {
  if (name == Mxfp4GroupedTileName(Mxfp4GroupedTile::kAuto)) return Mxfp4GroupedTile::kAuto;
  for (Mxfp4GroupedTile t : kMxfp4GroupedTiles) {
    if (name == Mxfp4GroupedTileName(t)) return t;
  }
  return std::nullopt;
}

Mxfp4GroupedTile ChooseMxfp4GroupedTile(int64_t rows_per_expert, bool gated, Mxfp4GemmMath math) {
  // mxfp4_grouped_gemm_bench on an H200 (README): of the 8-row tiles a ring
  // of 4 stages (5 CTAs an SM) beats 6 (3 CTAs) by 4 - 7 % and ties 3
  // (2026-12-02); from about 8 rows an expert (every local expert hit at
  // batch 64 of the EP8 slice: Poisson rows, 40 % of them past 8) the 16-row
  // tile's single pass beats the 8-row tile's second one.
  // With 1 - 4 rows (batch 8 - 32 of the slice) the gate/up product is 3 - 4%
  // faster on a ring of 3 stages (7 CTAs an SM); the plain one ties.
  if (gated && rows_per_expert >= 1 && rows_per_expert <= 4) return Mxfp4GroupedTile::kW4M8S3;
  if (rows_per_expert <= 4) return Mxfp4GroupedTile::kW4M8S4;
  if (rows_per_expert <= 11) return Mxfp4GroupedTile::kW4M16S4;
  // From about 12 rows an expert (Poisson rows, a third of them past 16) the
  // 32-row tile's single pass wins: small's slice at batch 64 (16 rows an
  // expert, both products on kW4M32; H100, thirtieth session) 2.071 -> 2.001
  // ms a step. The same bits on every tile.
  if (rows_per_expert <= 16) return Mxfp4GroupedTile::kW4M32;
  if (rows_per_expert <= 48) {
    return gated || Mxfp4MathIsWgmma(math) ? Mxfp4GroupedTile::kW4M32 : Mxfp4GroupedTile::kW2M32;
  }
  if (math == Mxfp4GemmMath::kWgmma && rows_per_expert >= 96) return Mxfp4GroupedTile::kW8M128;
  // Prefill-sized experts on the mma pair: kW4M32's passes beat kW8M64's
  // (mxfp4_grouped_gemm_bench 48 1, 512 rows an expert, H200 2026-12-04:
  // gate/up 14.1 vs 18.0 ms, down 5.6 vs 7.0 ms; the same bits). kWgmmaF16
  // keeps kW8M64 (14.1 / 5.5 ms there).
  if (math == Mxfp4GemmMath::kMmaF16 && rows_per_expert >= 256) return Mxfp4GroupedTile::kW4M32;
  return Mxfp4GroupedTile::kW8M64;
}

absl::Status CheckMxfp4GroupedGemmParams(const Mxfp4GroupedGemmParams& p) {
  if (p.w == nullptr || p.w_scales == nullptr || p.y == nullptr) {
    return absl::InvalidArgumentError("Mxfp4GroupedGemm: null pointer");
  }
  if (!AlignedTo(p.y, 4)) return absl::InvalidArgumentError("Mxfp4GroupedGemm: y misaligned");
  return CheckCommon("Mxfp4GroupedGemm", p.x, p.x_scales, p.expert_offsets, p.rows, p.n, p.k,
                     p.num_experts, p.tile, /*gated=*/false, p.math);
}

absl::Status CheckMxfp4GroupedGateUpParams(const Mxfp4GroupedGateUpParams& p) {
  if (p.w1 == nullptr || p.w1_scales == nullptr || p.w3 == nullptr || p.w3_scales == nullptr ||
      p.h == nullptr || p.h_scales == nullptr) {
    return absl::InvalidArgumentError("Mxfp4GroupedGateUp: null pointer");
  }
  if (p.inter % 32 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("Mxfp4GroupedGateUp: inter ", p.inter, " is not a multiple of 32"));
  }
  return CheckCommon("Mxfp4GroupedGateUp", p.x, p.x_scales, p.expert_offsets, p.rows, p.inter,
                     p.dim, p.num_experts, p.tile, /*gated=*/true, p.math);
}

uint16_t Mxfp4WeightBf16Bits(uint8_t code, uint8_t scale) {
  if (scale == kE8m0Nan) return 0x7FC0;
  return FloatToBf16Bits(E2m1ToFloat(code) * E8m0ToFloat(scale));
}

absl::Status CheckMxfp4Bf16GroupedGemmParams(const Mxfp4Bf16GroupedGemmParams& p) {
  constexpr const char* kWhat = "Mxfp4Bf16GroupedGemm";
  if (p.x == nullptr || p.expert_offsets == nullptr || p.w == nullptr || p.w_scales == nullptr ||
      (p.y == nullptr && !p.swiglu)) {
    return absl::InvalidArgumentError(absl::StrCat(kWhat, ": null pointer"));
  }
  if (p.swiglu && ((p.x_rows != 256 && !p.decode_mma) || p.w_up == nullptr ||
                   p.w_up_scales == nullptr || p.h_codes == nullptr || p.h_scales == nullptr ||
                   p.n % 32 != 0 || !AlignedTo(p.h_codes, 8))) {
    return absl::InvalidArgumentError(
        absl::StrCat(kWhat,
                     ": swiglu needs x_rows 256 or decode_mma, w_up, w_up_scales, h_codes (8-byte "
                     "aligned) and "
                     "h_scales, and n a multiple of 32"));
  }
  if (p.rows < 0 || p.n <= 0 || p.k <= 0 || p.num_experts <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(kWhat, ": bad shape rows ", p.rows, " n ", p.n,
                                                   " k ", p.k, " experts ", p.num_experts));
  }
  if (p.k % (2 * kMxfp4Bf16StageK) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(kWhat, ": k ", p.k, " is not a multiple of ", 2 * kMxfp4Bf16StageK));
  }
  if (p.k > (int64_t{1} << 30) || p.n > (int64_t{1} << 30) || p.rows > (int64_t{1} << 30)) {
    return absl::InvalidArgumentError(absl::StrCat(kWhat, ": n, k or rows above 2^30"));
  }
  if (!AlignedTo(p.x, 16) || !AlignedTo(p.y, dense::Fp8GemmOutputBytes(p.output)) ||
      !AlignedTo(p.row_role, 4)) {
    return absl::InvalidArgumentError(absl::StrCat(
        kWhat, ": x must be 16-byte aligned, y aligned to its element, row_role to 4 bytes"));
  }
  if (p.h_bf16 != nullptr && (!p.decode_mma || !p.swiglu || !AlignedTo(p.h_bf16, 16))) {
    return absl::InvalidArgumentError(
        absl::StrCat(kWhat, ": h_bf16 needs decode_mma and swiglu, and 16-byte alignment"));
  }
  if (p.decode_mma) {
    if (p.x_rows != 0 && p.x_rows != 8 && p.x_rows != 16) {
      return absl::InvalidArgumentError(
          absl::StrCat(kWhat, ": decode_mma takes x_rows 0, 8 or 16, not ", p.x_rows));
    }
    if (p.register_a || p.deep_ring || p.stage_scale_test || p.fit_tile_rows ||
        p.consumer_warpgroups != 0 || p.tail_rows || p.x_multicast) {
      return absl::InvalidArgumentError(absl::StrCat(
          kWhat,
          ": decode_mma takes none of register_a, deep_ring, stage_scale_test, fit_tile_rows, "
          "consumer_warpgroups, tail_rows and x_multicast"));
    }
  }
  const bool narrow =
      p.x_rows == 80 || p.x_rows == 64 || p.x_rows == 32 || p.x_rows == 16 || p.x_rows == 8;
  if (!p.decode_mma && p.x_rows != 0 && p.x_rows != 128 && !(narrow && p.register_a) &&
      p.x_rows != 256) {
    return absl::InvalidArgumentError(absl::StrCat(
        kWhat, ": x_rows ", p.x_rows,
        " (0 or 128; 80, 64, 32, 16 or 8 with register_a; 256 with register_a, deep_ring and "
        "stage_scale_test)"));
  }
  if (p.x_rows == 256 && (!p.register_a || !p.deep_ring || !p.stage_scale_test || p.fit_tile_rows ||
                          (p.consumer_warpgroups != 0 && p.consumer_warpgroups != 2))) {
    return absl::InvalidArgumentError(absl::StrCat(
        kWhat,
        ": x_rows 256 needs register_a, deep_ring and stage_scale_test, two consumer warpgroups "
        "and no fit_tile_rows"));
  }
  if (p.tail_rows && p.x_rows != 256) {
    return absl::InvalidArgumentError(absl::StrCat(kWhat, ": tail_rows needs x_rows 256"));
  }
  if (p.x_multicast && p.x_rows != 256) {
    return absl::InvalidArgumentError(absl::StrCat(kWhat, ": x_multicast needs x_rows 256"));
  }
  if (p.deep_ring && !p.register_a) {
    return absl::InvalidArgumentError(absl::StrCat(kWhat, ": deep_ring needs register_a"));
  }
  if (p.stage_scale_test && !p.register_a) {
    return absl::InvalidArgumentError(absl::StrCat(kWhat, ": stage_scale_test needs register_a"));
  }
  if (p.stage_scale_test && p.deep_ring && p.x_rows != 256 &&
      (p.consumer_warpgroups != 3 || p.fit_tile_rows)) {
    return absl::InvalidArgumentError(
        absl::StrCat(kWhat,
                     ": stage_scale_test with deep_ring needs three consumer warpgroups and no "
                     "fit_tile_rows (or x_rows 256)"));
  }
  if (p.fit_tile_rows && (!p.stage_scale_test || (p.x_rows != 0 && p.x_rows != 128))) {
    return absl::InvalidArgumentError(
        absl::StrCat(kWhat, ": fit_tile_rows needs stage_scale_test and x_rows 0 or 128"));
  }
  if (p.consumer_warpgroups != 0 && p.consumer_warpgroups != 2 &&
      (p.consumer_warpgroups != 3 || !p.stage_scale_test || (p.x_rows != 0 && p.x_rows != 128))) {
    return absl::InvalidArgumentError(
        absl::StrCat(kWhat, ": consumer_warpgroups ", p.consumer_warpgroups,
                     " (0 or 2; 3 with stage_scale_test and x_rows 0 or 128)"));
  }
  const int x_rows = Mxfp4Bf16XRows(p);
  if ((p.rows + x_rows - 1) / x_rows + p.num_experts > kMaxGridY) {
    return absl::InvalidArgumentError(
        absl::StrCat(kWhat, ": ", p.rows, " rows over ", p.num_experts,
                     " experts need more row tiles than the grid holds (65535)"));
  }
  if (p.widener_warps != 0 && p.widener_warps != 4 && p.widener_warps != 8) {
    return absl::InvalidArgumentError(
        absl::StrCat(kWhat, ": widener_warps ", p.widener_warps, " (0, 4 or 8)"));
  }
  return absl::OkStatus();
}

}  // namespace weir::kernels::cuda
