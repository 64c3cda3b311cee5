// kernels/cpu/weight_quant.cc

#include "kernels/cpu/weight_quant.h"

#include <algorithm>
#include <bit>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "kernels/common/numeric_formats.h"
#include "kernels/cpu/quant.h"

namespace weir::kernels::cpu {
namespace {

absl::Status CheckDims(int64_t rows, int64_t cols, int block) {
  if (rows <= 0 || cols <= 0 || block <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad weight shape [", rows, ", ", cols, "] block ", block));
  }
  return absl::OkStatus();
}

absl::Status CheckSize(const char* what, size_t got, int64_t want) {
  if (static_cast<int64_t>(got) == want) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(what, " has ", got, " entries, expected ", want));
}

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

int64_t Fp8WeightScaleCount(int64_t rows, int64_t cols, int block) {
  return CeilDiv(rows, block) * CeilDiv(cols, block);
}

absl::Status DequantizeFp8Weight(std::span<const uint8_t> codes, std::span<const uint8_t> scales,
                                 int64_t rows, int64_t cols, int block, std::span<float> out) {
  RETURN_IF_ERROR(CheckDims(rows, cols, block));
  RETURN_IF_ERROR(CheckSize("codes", codes.size(), rows * cols));
  RETURN_IF_ERROR(CheckSize("scales", scales.size(), Fp8WeightScaleCount(rows, cols, block)));
  RETURN_IF_ERROR(CheckSize("out", out.size(), rows * cols));
  const int64_t scale_cols = CeilDiv(cols, block);
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* scale_row = scales.data() + (r / block) * scale_cols;
    for (int64_t c = 0; c < cols; ++c) {
      out[r * cols + c] = E4m3ToFloat(codes[r * cols + c]) * E8m0ToFloat(scale_row[c / block]);
    }
  }
  return absl::OkStatus();
}

absl::Status QuantizeFp8Weight(std::span<const float> w, int64_t rows, int64_t cols, int block,
                               std::span<uint8_t> codes, std::span<uint8_t> scales) {
  RETURN_IF_ERROR(CheckDims(rows, cols, block));
  RETURN_IF_ERROR(CheckSize("w", w.size(), rows * cols));
  RETURN_IF_ERROR(CheckSize("codes", codes.size(), rows * cols));
  RETURN_IF_ERROR(CheckSize("scales", scales.size(), Fp8WeightScaleCount(rows, cols, block)));
  const int64_t scale_cols = CeilDiv(cols, block);
  const float inv448 = static_cast<float>(1.0 / 448.0);
  for (int64_t br = 0; br < CeilDiv(rows, block); ++br) {
    for (int64_t bc = 0; bc < scale_cols; ++bc) {
      const int64_t r0 = br * block, r1 = std::min(rows, r0 + block);
      const int64_t c0 = bc * block, c1 = std::min(cols, c0 + block);
      float amax = 0.0f;
      bool finite = true;
      for (int64_t r = r0; r < r1; ++r) {
        for (int64_t c = c0; c < c1; ++c) {
          const float v = w[r * cols + c];
          finite = finite && std::isfinite(v);
          amax = std::max(amax, std::fabs(v));
        }
      }
      const uint8_t code = finite ? Ue8m0CeilCode(std::max(amax, 1e-4f) * inv448) : kE8m0Nan;
      scales[br * scale_cols + bc] = code;
      const float s = E8m0ToFloat(code);
      for (int64_t r = r0; r < r1; ++r) {
        for (int64_t c = c0; c < c1; ++c) {
          const float q = std::clamp(w[r * cols + c] / s, -kE4m3Max, kE4m3Max);
          codes[r * cols + c] = finite ? FloatToE4m3(q) : uint8_t{0x7F};
        }
      }
    }
  }
  return absl::OkStatus();
}

absl::Status DequantizeMxfp4Weight(std::span<const uint8_t> packed,
                                   std::span<const uint8_t> scales, int64_t rows, int64_t cols,
                                   std::span<float> out) {
  RETURN_IF_ERROR(CheckDims(rows, cols, kMxfp4Block));
  if (cols % kMxfp4Block != 0) {
    return absl::InvalidArgumentError(absl::StrCat("MXFP4 cols ", cols, " not a multiple of 32"));
  }
  RETURN_IF_ERROR(CheckSize("out", out.size(), rows * cols));
  return DequantizeFp4(packed, scales, kMxfp4Block, Fp4Scale::kE8m0, out);
}

absl::Status QuantizeMxfp4Weight(std::span<const float> w, int64_t rows, int64_t cols,
                                 std::span<uint8_t> packed, std::span<uint8_t> scales) {
  RETURN_IF_ERROR(CheckDims(rows, cols, kMxfp4Block));
  if (cols % kMxfp4Block != 0) {
    return absl::InvalidArgumentError(absl::StrCat("MXFP4 cols ", cols, " not a multiple of 32"));
  }
  RETURN_IF_ERROR(CheckSize("w", w.size(), rows * cols));
  return QuantizeFp4(w, kMxfp4Block, Fp4Scale::kE8m0, packed, scales);
}

absl::StatusOr<int64_t> Mxfp4ToFp8Tiles(std::span<const uint8_t> packed,
                                        std::span<const uint8_t> scales, int64_t rows, int64_t cols,
                                        std::span<uint8_t> codes, std::span<uint8_t> tile_scales,
                                        std::span<uint8_t> exact) {
  constexpr int kTile = kMxfp4Block;  // 32: the MXFP4 block along K and the FP8 tile
  RETURN_IF_ERROR(CheckDims(rows, cols, kTile));
  if (cols % kTile != 0) {
    return absl::InvalidArgumentError(absl::StrCat("MXFP4 cols ", cols, " not a multiple of 32"));
  }
  const int64_t blocks = cols / kTile, tile_rows = CeilDiv(rows, kTile);
  RETURN_IF_ERROR(CheckSize("packed", packed.size(), rows * cols / 2));
  RETURN_IF_ERROR(CheckSize("scales", scales.size(), rows * blocks));
  RETURN_IF_ERROR(CheckSize("codes", codes.size(), rows * cols));
  RETURN_IF_ERROR(CheckSize("tile_scales", tile_scales.size(), tile_rows * blocks));
  RETURN_IF_ERROR(CheckSize("exact", exact.size(), tile_rows * blocks));
  int64_t inexact = 0;
  for (int64_t tr = 0; tr < tile_rows; ++tr) {
    const int64_t r0 = tr * kTile, r1 = std::min(rows, r0 + kTile);
    for (int64_t kb = 0; kb < blocks; ++kb) {
      uint8_t top = 0;
      bool ok = true;
      for (int64_t r = r0; r < r1; ++r) {
        const uint8_t s = scales[r * blocks + kb];
        ok = ok && s != kE8m0Nan;
        top = std::max(top, s);
      }
      for (int64_t r = r0; r < r1 && ok; ++r) {
        const int shift = top - scales[r * blocks + kb];  // binades below the tile's scale
        for (int64_t c = kb * kTile; c < (kb + 1) * kTile && ok; ++c) {
          const uint8_t byte = packed[(r * cols + c) / 2];
          const uint8_t e2m1 = c % 2 == 0 ? byte & 0xF : byte >> 4;
          // Exact in fp32 down to 2^-149; a nonzero code that underflows to 0
          // lost its value.
          const float v = std::ldexp(E2m1ToFloat(e2m1), -shift);
          const uint8_t code = FloatToE4m3(v);
          ok = std::bit_cast<uint32_t>(E4m3ToFloat(code)) == std::bit_cast<uint32_t>(v) &&
               (v != 0.0f || (e2m1 & 0x7) == 0);
          codes[r * cols + c] = code;
        }
      }
      if (!ok) {
        for (int64_t r = r0; r < r1; ++r) {
          std::fill_n(codes.begin() + r * cols + kb * kTile, kTile, uint8_t{0});
        }
      }
      tile_scales[tr * blocks + kb] = top;
      exact[tr * blocks + kb] = ok ? 1 : 0;
      inexact += ok ? 0 : 1;
    }
  }
  return inexact;
}

}  // namespace weir::kernels::cpu
