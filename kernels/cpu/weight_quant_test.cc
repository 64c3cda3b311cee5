// kernels/cpu/weight_quant_test.cc

#include "kernels/cpu/weight_quant.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/common/numeric_formats.h"

namespace weir::kernels::cpu {
namespace {

TEST(Fp8Weight, TileScalesIncludingPartialEdgeTiles) {
  // [3, 5] with 2x2 tiles: scales [2, 3]; every code is 1.0, so out = tile scale.
  const int64_t rows = 3, cols = 5;
  std::vector<uint8_t> codes(rows * cols, 0x38);
  std::vector<uint8_t> scales = {127, 128, 129,   // tile rows 0-1
                                 126, 130, 120};  // tile row 2 (partial)
  ASSERT_EQ(Fp8WeightScaleCount(rows, cols, 2), 6);
  std::vector<float> out(rows * cols);
  ASSERT_TRUE(DequantizeFp8Weight(codes, scales, rows, cols, 2, out).ok());
  const float expect[3][5] = {{1, 1, 2, 2, 4}, {1, 1, 2, 2, 4}, {0.5f, 0.5f, 8, 8, 0.0078125f}};
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) EXPECT_EQ(out[r * cols + c], expect[r][c]) << r << "," << c;
  }
}

TEST(Fp8Weight, QuantizeRoundTripAndTileIndependence) {
  const int64_t rows = 70, cols = 40;  // partial tiles on both edges with block 32
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  std::vector<float> w(rows * cols);
  for (float& v : w) v = normal(rng);
  w[0] = 448.0f;  // tile (0,0) gets scale 1; other tiles must not notice
  const int64_t n_scales = Fp8WeightScaleCount(rows, cols, 32);
  std::vector<uint8_t> codes(w.size()), scales(n_scales);
  ASSERT_TRUE(QuantizeFp8Weight(w, rows, cols, 32, codes, scales).ok());
  EXPECT_EQ(scales[0], 127);
  std::vector<float> out(w.size());
  ASSERT_TRUE(DequantizeFp8Weight(codes, scales, rows, cols, 32, out).ok());
  EXPECT_EQ(out[0], 448.0f);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const float x = w[r * cols + c];
      const float s = E8m0ToFloat(scales[(r / 32) * 2 + c / 32]);
      ASSERT_LE(std::fabs(out[r * cols + c] - x), std::fabs(x) / 16 + s * std::ldexp(1.0f, -10));
      if (r >= 32 || c >= 32) {
        ASSERT_LT(s, 0.001f);  // small-valued tiles keep fine scales
      }
    }
  }
  // Re-quantizing the dequantized weight reproduces the same bytes.
  std::vector<uint8_t> codes2(w.size()), scales2(n_scales);
  ASSERT_TRUE(QuantizeFp8Weight(out, rows, cols, 32, codes2, scales2).ok());
  std::vector<float> out2(w.size());
  ASSERT_TRUE(DequantizeFp8Weight(codes2, scales2, rows, cols, 32, out2).ok());
  EXPECT_EQ(out, out2);
}

TEST(Fp8Weight, RejectsBadShapes) {
  std::vector<uint8_t> codes(6), scales(1);
  std::vector<float> out(6);
  EXPECT_EQ(DequantizeFp8Weight(codes, scales, 0, 6, 32, out).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DequantizeFp8Weight(codes, scales, 2, 3, 1, out).code(),
            absl::StatusCode::kInvalidArgument);  // needs 6 scales
  EXPECT_TRUE(DequantizeFp8Weight(codes, scales, 2, 3, 32, out).ok());
}

TEST(Mxfp4Weight, PerRowPer32Scales) {
  const int64_t rows = 2, cols = 64;
  std::vector<float> w(rows * cols, 0.0f);
  w[0] = 6.0f;           // row 0, block 0: s = 1
  w[1] = -3.0f;
  w[32] = 0.75f;         // row 0, block 1: amax .75 -> s = 2^-3; .75/.125 = 6
  w[64 + 5] = 12.0f;     // row 1, block 0: s = 2
  std::vector<uint8_t> packed(rows * cols / 2), scales(rows * cols / 32);
  ASSERT_TRUE(QuantizeMxfp4Weight(w, rows, cols, packed, scales).ok());
  EXPECT_EQ(scales[0], 127);
  EXPECT_EQ(scales[1], 124);
  EXPECT_EQ(scales[2], 128);
  EXPECT_EQ(packed[0], 0xD7);  // 6 -> 0x7 low, -3 -> 0xD high
  std::vector<float> out(w.size());
  ASSERT_TRUE(DequantizeMxfp4Weight(packed, scales, rows, cols, out).ok());
  EXPECT_EQ(out, w);  // every value here is exactly representable
  std::vector<float> bad(2 * 48);
  std::vector<uint8_t> p48(48), s48(3);
  EXPECT_EQ(QuantizeMxfp4Weight(bad, 2, 48, p48, s48).code(), absl::StatusCode::kInvalidArgument);
}

// The tile FP8 form of an MXFP4 weight: where a tile is marked exact, the FP8
// dequantization gives the MXFP4 one's floats bit for bit; a tile whose rows
// span at most 8 binades is always exact, one with a NaN scale never; a
// wider span is exact only when its small rows hold no underflowing code.
TEST(Mxfp4Weight, TileFp8FormKeepsEveryValueOfItsExactTiles) {
  const int64_t rows = 70, cols = 96;  // a partial tile row; 3 K blocks
  const int64_t tile_rows = 3, blocks = 3;
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> byte(0, 255);
  for (int spread : {0, 3, 8, 9, 12, 40}) {
    std::vector<uint8_t> packed(rows * cols / 2), scales(rows * blocks);
    for (uint8_t& b : packed) b = static_cast<uint8_t>(byte(rng));
    std::uniform_int_distribution<int> scale(100, 100 + spread);
    for (uint8_t& s : scales) s = static_cast<uint8_t>(scale(rng));
    // Tile (0, 0): one row at the spread's bottom, the rest at its top.
    for (int64_t r = 0; r < 32; ++r) scales[r * blocks] = static_cast<uint8_t>(100 + spread);
    scales[5 * blocks] = 100;
    // Tile (1, 1): a NaN scale. Tile (2, 2): extreme scales 0 and 254 on zeros only.
    scales[40 * blocks + 1] = kE8m0Nan;
    for (int64_t r = 64; r < rows; ++r) {
      scales[r * blocks + 2] = r == 64 ? 0 : 254;
      for (int64_t c = 64; c < 96; ++c) packed[(r * cols + c) / 2] = 0;
    }
    // Tile (2, 1): the same scales with 0.5s in the small row: 254 binades
    // below the tile's scale they underflow even fp32 (never exact).
    for (int64_t r = 64; r < rows; ++r) scales[r * blocks + 1] = r == 64 ? 0 : 254;
    for (int64_t c = 32; c < 64; c += 2) packed[(64 * cols + c) / 2] = 0x11;
    std::vector<uint8_t> codes(rows * cols, 0xAA), tile_scales(tile_rows * blocks),
        exact(tile_rows * blocks);
    absl::StatusOr<int64_t> inexact =
        Mxfp4ToFp8Tiles(packed, scales, rows, cols, codes, tile_scales, exact);
    ASSERT_TRUE(inexact.ok()) << inexact.status();
    std::vector<float> want(rows * cols), got(rows * cols);
    ASSERT_TRUE(DequantizeMxfp4Weight(packed, scales, rows, cols, want).ok());
    ASSERT_TRUE(DequantizeFp8Weight(codes, tile_scales, rows, cols, 32, got).ok());
    int64_t counted = 0;
    for (int64_t tr = 0; tr < tile_rows; ++tr) {
      for (int64_t kb = 0; kb < blocks; ++kb) {
        const bool ok = exact[tr * blocks + kb] != 0;
        counted += ok ? 0 : 1;
        uint8_t top = 0;
        for (int64_t r = tr * 32; r < std::min(rows, tr * 32 + 32); ++r) {
          top = std::max(top, scales[r * blocks + kb]);
        }
        EXPECT_EQ(tile_scales[tr * blocks + kb], top);
        if (top - 100 <= 8 && !(tr == 1 && kb == 1)) {
          EXPECT_TRUE(ok) << "spread " << spread << " tile " << tr << "," << kb;
        }
        for (int64_t r = tr * 32; r < std::min(rows, tr * 32 + 32); ++r) {
          for (int64_t c = kb * 32; c < kb * 32 + 32; ++c) {
            if (ok) {
              ASSERT_EQ(std::bit_cast<uint32_t>(got[r * cols + c]),
                        std::bit_cast<uint32_t>(want[r * cols + c]))
                  << "spread " << spread << " at " << r << "," << c;
            } else {
              ASSERT_EQ(codes[r * cols + c], 0) << r << "," << c;
            }
          }
        }
      }
    }
    EXPECT_EQ(*inexact, counted);
    EXPECT_FALSE(exact[1 * blocks + 1]) << "a NaN scale is never exact";
    EXPECT_TRUE(exact[2 * blocks + 2]) << "zeros survive any spread";
    EXPECT_FALSE(exact[2 * blocks + 1]) << "a code that underflows fp32 is not kept";
    // Tile (0, 0) spans `spread` binades: exact up to 8, and past 8 only if
    // row 5 holds no code that underflows (a 0.5 or 1.5 at 9 binades, ...).
    if (spread <= 8) {
      EXPECT_TRUE(exact[0]) << spread;
    }
    if (spread >= 12) {
      EXPECT_FALSE(exact[0]) << spread;
    }
  }
  std::vector<uint8_t> packed(32 * 32 / 2), scales(32), codes(32 * 32), ts(1), ex(1);
  EXPECT_FALSE(Mxfp4ToFp8Tiles(packed, scales, 32, 33, codes, ts, ex).ok());
  EXPECT_FALSE(Mxfp4ToFp8Tiles(packed, scales, 32, 32, codes, ts, std::span<uint8_t>()).ok());
}

}  // namespace
}  // namespace weir::kernels::cpu
