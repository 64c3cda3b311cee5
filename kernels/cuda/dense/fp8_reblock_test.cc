// CPU test of the re-blocking specification (fp8_reblock_ref.h): one code's
// rewrite against exact arithmetic, the kernels' bit form against it, whole
// X and W forms value for value, and the scale layouts cuBLASLt reads.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/common/numeric_formats.h"
#include "kernels/cuda/dense/fp8_reblock_ref.h"

namespace weir::kernels::cuda::dense {
namespace {

bool IsNanCode(int code) { return (code & 0x7F) == 0x7F; }

// (a) Every finite code times 2^-d, d = 0..20: the rewrite is the exact value
// iff Fp8ReblockIsExact says so, and otherwise the nearest e4m3 value, ties
// to the even code; the task's sufficient condition (a normal 1.mmm 2^e with
// e - d >= -6, or zero) always gives an exact rewrite.
TEST(Fp8ReblockTest, EveryCodeAndShiftAgainstExactArithmetic) {
  int64_t exact = 0, inexact = 0, exact_past_normal_range = 0;
  for (int code = 0; code < 256; ++code) {
    if (IsNanCode(code)) continue;
    const double v0 = E4m3ToFloat(static_cast<uint8_t>(code));
    for (int d = 0; d <= 20; ++d) {
      const double want = std::ldexp(v0, -d);  // exact in double
      const uint8_t got_code = Fp8ReblockCode(static_cast<uint8_t>(code), d);
      const double got = E4m3ToFloat(got_code);
      const bool is_exact = Fp8ReblockIsExact(static_cast<uint8_t>(code), d);
      EXPECT_EQ(got == want, is_exact) << "code 0x" << std::hex << code << std::dec << " d " << d;
      EXPECT_EQ(got_code & 0x80, code & 0x80) << "sign of code " << code << " d " << d;
      const int e_field = (code & 0x7F) >> 3;
      const bool brief_condition = (code & 0x7F) == 0 || (e_field >= 1 && (e_field - 7) - d >= -6);
      if (brief_condition) {
        EXPECT_TRUE(is_exact) << "code " << code << " d " << d;
      }
      if (is_exact && !brief_condition) ++exact_past_normal_range;
      if (is_exact) {
        ++exact;
        continue;
      }
      ++inexact;
      // Nearest among all finite codes, ties to the even code.
      const double err = std::fabs(got - want);
      EXPECT_LE(err, std::ldexp(1.0, -10)) << "code " << code << " d " << d;  // half a step
      for (int c = 0; c < 256; ++c) {
        if (IsNanCode(c)) continue;
        const double other =
            std::fabs(static_cast<double>(E4m3ToFloat(static_cast<uint8_t>(c))) - want);
        EXPECT_LE(err, other) << "code " << code << " d " << d << " candidate " << c;
        if (other == err && E4m3ToFloat(static_cast<uint8_t>(c)) != got) {
          EXPECT_EQ(got_code & 1, 0) << "tie not to even: code " << code << " d " << d;
        }
      }
    }
  }
  std::printf("exact %lld (of which %lld below the normal range), rounded %lld\n",
              static_cast<long long>(exact), static_cast<long long>(exact_past_normal_range),
              static_cast<long long>(inexact));
  EXPECT_GT(inexact, 0);
  EXPECT_GT(exact_past_normal_range, 0);  // e.g. 2^-6 >> 1 = 4 x 2^-9
}

// The kernels' integer form gives the specification's bits for every code
// (NaN codes included) and every shift a byte of scales can make.
TEST(Fp8ReblockTest, KernelBitFormIsTheSpecification) {
  int64_t mismatches = 0;
  for (int code = 0; code < 256; ++code) {
    for (int d = 0; d <= 255; ++d) {
      const uint32_t bits =
          Fp8ReblockCodeBits(static_cast<uint32_t>(code), static_cast<uint32_t>(d));
      const uint8_t spec = Fp8ReblockCode(static_cast<uint8_t>(code), d);
      if (bits != spec) {
        if (++mismatches < 10) {
          ADD_FAILURE() << "code 0x" << std::hex << code << std::dec << " d " << d << ": bits "
                        << bits << " spec " << static_cast<int>(spec);
        }
      }
    }
  }
  EXPECT_EQ(mismatches, 0);
  EXPECT_EQ(Fp8ReblockCodeBits(0x7F, 9), 0x7Fu);
  EXPECT_EQ(Fp8ReblockCodeBits(0xFF, 3), 0xFFu);
  EXPECT_EQ(Fp8ReblockCodeBits(0x80, 5), 0x80u);  // -0 stays -0
}

// Random stored scales: a base per span / block and offsets 0..12 within it
// (so some codes fall below the subnormal grid), raw random codes with zeros
// and negative codes, no NaN codes.
struct Stored {
  std::vector<uint8_t> codes, scales;
};

Stored RandomStored(int64_t rows, int64_t k, int64_t scale_rows, std::mt19937& rng) {
  Stored s;
  std::uniform_int_distribution<int> byte(0, 255), base(110, 140), offset(0, 12), pick(0, 9);
  s.codes.resize(rows * k);
  for (uint8_t& c : s.codes) {
    int v = byte(rng);
    if (IsNanCode(v)) v = 0x7E;
    if (pick(rng) == 0) v = pick(rng) < 5 ? 0x00 : 0x80;  // signed zeros
    c = static_cast<uint8_t>(v);
  }
  const int64_t k_blocks = k / 32;
  s.scales.resize(scale_rows * k_blocks);
  for (int64_t r = 0; r < scale_rows; ++r) {
    for (int64_t j = 0; j < k_blocks; ++j) {
      // One base per 4 x 4 group so the 128 x 128 blocks see the spread too.
      std::mt19937 group_rng(static_cast<uint32_t>((r / 4) * 7919 + j / 4 + 17));
      const int b = base(group_rng);
      s.scales[r * k_blocks + j] = static_cast<uint8_t>(b - offset(rng));
    }
  }
  return s;
}

// Compares every element's value before and after: the same double where
// the rewrite is exact, within 2^-10 of the block scale elsewhere. Returns
// the number of rounded elements.
int64_t CheckValues(const Stored& in, const Fp8Reblocked& out, int64_t rows, int64_t k,
                    int rows_per_scale, bool tiles) {
  int64_t rounded = 0;
  const int64_t k_blocks = k / 32;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < k; ++c) {
      const int s = in.scales[(r / rows_per_scale) * k_blocks + c / 32];
      const float big_scale = tiles ? out.scales[Fp8Blk128ScaleIndex(r / 128, c / 128, k)]
                                    : out.scales[Fp8Vec128ScaleIndex(r, c / 128, rows)];
      const int big = std::ilogb(big_scale) + 127;  // a power of two, possibly subnormal
      const uint8_t code = in.codes[r * k + c], new_code = out.codes[r * k + c];
      const double before = std::ldexp(static_cast<double>(E4m3ToFloat(code)), s - 127);
      const double after = static_cast<double>(E4m3ToFloat(new_code)) * big_scale;
      EXPECT_GE(big, s) << "row " << r << " col " << c;
      if (Fp8ReblockIsExact(code, big - s)) {
        EXPECT_EQ(after, before) << "row " << r << " col " << c;
        EXPECT_EQ(std::signbit(after), std::signbit(before)) << "row " << r << " col " << c;
      } else {
        ++rounded;
        EXPECT_LE(std::fabs(after - before), std::ldexp(static_cast<double>(big_scale), -10))
            << "row " << r << " col " << c;
      }
    }
  }
  return rounded;
}

// (b) X (a scale per row and 32 of K) and W in the 1x128 form (32 x 32
// tiles), rows not multiples of 4, 32 or 128.
TEST(Fp8ReblockTest, RowsFormKeepsEveryValueItCan) {
  std::mt19937 rng(7);
  for (auto [rows, k, rows_per_scale] : {std::tuple<int64_t, int64_t, int>{1, 128, 1},
                                         {37, 1024, 1},
                                         {300, 512, 1},
                                         {176, 640, 32},
                                         {512, 1024, 32},
                                         {33, 256, 32}}) {
    const int64_t scale_rows = (rows + rows_per_scale - 1) / rows_per_scale;
    const Stored in = RandomStored(rows, k, scale_rows, rng);
    const Fp8Reblocked out = ReblockFp8RowsRef(in.codes, in.scales, rows, k, rows_per_scale);
    ASSERT_EQ(static_cast<int64_t>(out.codes.size()), Fp8LtPaddedRows(rows) * k);
    ASSERT_EQ(static_cast<int64_t>(out.scales.size()), Fp8Vec128ScaleFloats(rows, k));
    const int64_t rounded = CheckValues(in, out, rows, k, rows_per_scale, false);
    EXPECT_EQ(rounded, out.inexact);
    EXPECT_GT(rounded, 0) << "rows " << rows;  // offsets up to 12 reach the subnormals
    // Pad rows: zero codes, zero scales.
    for (int64_t r = rows; r < Fp8LtPaddedRows(rows); ++r) {
      for (int64_t c = 0; c < k; ++c) EXPECT_EQ(out.codes[r * k + c], 0);
      for (int64_t kb = 0; kb < k / 128; ++kb) {
        EXPECT_EQ(out.scales[Fp8Vec128ScaleIndex(r, kb, rows)], 0.0f);
      }
    }
    std::printf("rows %lld k %lld rows_per_scale %d: %lld of %lld codes rounded\n",
                static_cast<long long>(rows), static_cast<long long>(k), rows_per_scale,
                static_cast<long long>(rounded), static_cast<long long>(rows * k));
  }
}

// (b) W in the 128 x 128 form, n not a multiple of 128 (the last block's
// missing tile rows do not count).
TEST(Fp8ReblockTest, TilesFormKeepsEveryValueItCan) {
  std::mt19937 rng(11);
  for (auto [n, k] : {std::pair<int64_t, int64_t>{16, 128}, {176, 640}, {512, 1024}, {1296, 512}}) {
    const Stored in = RandomStored(n, k, (n + 31) / 32, rng);
    const Fp8Reblocked out = ReblockFp8TilesRef(in.codes, in.scales, n, k);
    ASSERT_EQ(static_cast<int64_t>(out.codes.size()), n * k);
    ASSERT_EQ(static_cast<int64_t>(out.scales.size()), Fp8Blk128ScaleFloats(n, k));
    const int64_t rounded = CheckValues(in, out, n, k, 32, true);
    EXPECT_EQ(rounded, out.inexact);
    std::printf("n %lld k %lld: %lld of %lld codes rounded\n", static_cast<long long>(n),
                static_cast<long long>(k), static_cast<long long>(rounded),
                static_cast<long long>(n * k));
  }
}

// A NaN scale byte (0xFF) makes its span's (block's) scale NaN: every value
// it covers reads NaN, as the stored block did.
TEST(Fp8ReblockTest, NanScaleCoversItsBlock) {
  const int64_t rows = 2, k = 256;
  std::vector<uint8_t> codes(rows * k, 0x38), scales(rows * k / 32, 127);  // 1.0 x 2^0
  scales[1 * 8 + 5] = 0xFF;  // row 1, 32-block 5: span 1
  const Fp8Reblocked x = ReblockFp8RowsRef(codes, scales, rows, k, 1);
  EXPECT_TRUE(std::isnan(x.scales[Fp8Vec128ScaleIndex(1, 1, rows)]));
  EXPECT_EQ(x.scales[Fp8Vec128ScaleIndex(1, 0, rows)], 1.0f);
  EXPECT_EQ(x.scales[Fp8Vec128ScaleIndex(0, 1, rows)], 1.0f);
  const Fp8Reblocked w = ReblockFp8TilesRef(std::vector<uint8_t>(160 * k, 0x38),
                                            std::vector<uint8_t>(5 * 8, 127), 160, k);
  for (float s : {w.scales[Fp8Blk128ScaleIndex(0, 0, k)], w.scales[Fp8Blk128ScaleIndex(1, 1, k)]}) {
    EXPECT_EQ(s, 1.0f);
  }
}

// (c) The layouts, in numbers: VEC128 is row-major within a K block
// (outer-dimension major, stride the padded rows), BLK128x128 K-major with
// rows of L4 = round_up(k / 128, 4) floats; pads are zero.
TEST(Fp8ReblockTest, ScalesSitWhereTheLayoutSays) {
  EXPECT_EQ(Fp8LtPaddedRows(1), 4);
  EXPECT_EQ(Fp8LtPaddedRows(37), 40);
  EXPECT_EQ(Fp8LtPaddedRows(4096), 4096);
  EXPECT_EQ(Fp8Vec128ScaleIndex(3, 1, 5), 11);  // kb 1 x 8 padded rows + row 3
  EXPECT_EQ(Fp8Vec128ScaleIndex(0, 2, 4096), 8192);
  EXPECT_EQ(Fp8Vec128ScaleFloats(5, 256), 16);
  EXPECT_EQ(Fp8Blk128ScaleStride(640), 8);  // 5 K blocks padded to 8
  EXPECT_EQ(Fp8Blk128ScaleStride(1024), 8);
  EXPECT_EQ(Fp8Blk128ScaleIndex(1, 4, 640), 12);
  EXPECT_EQ(Fp8Blk128ScaleFloats(160, 640), 16);

  // X: 5 rows, k 256; the scale byte of (row r, 32-block j) is 100 + 2r + j / 4
  // (+ j % 4 - 3 so the largest is the span's last block): S = 100 + 2r + kb.
  {
    const int64_t rows = 5, k = 256;
    std::vector<uint8_t> codes(rows * k, 0x38), scales(rows * k / 32);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t j = 0; j < k / 32; ++j)
        scales[r * 8 + j] = static_cast<uint8_t>(97 + 2 * r + j / 4 + j % 4);
    }
    const Fp8Reblocked out = ReblockFp8RowsRef(codes, scales, rows, k, 1);
    ASSERT_EQ(out.scales.size(), 16u);
    for (int64_t i = 0; i < 16; ++i) {
      const int64_t kb = i / 8, r = i % 8;
      const float want =
          r < rows ? std::ldexp(1.0f, static_cast<int>(100 + 2 * r + kb) - 127) : 0.0f;
      EXPECT_EQ(out.scales[i], want) << "float " << i;
    }
  }
  // W 128 x 128: n 160 (one full block, one of 32 rows: tile row 4 only),
  // k 640. Tile (t, j) has byte 60 + t + 10 (j / 4), except in block (1, *)
  // whose one tile row gets 90 + j / 4: S(0, kb) = 63 + 10 kb, S(1, kb) = 90 + kb.
  {
    const int64_t n = 160, k = 640;
    std::vector<uint8_t> codes(n * k, 0x38), scales(5 * 20);
    for (int64_t t = 0; t < 5; ++t) {
      for (int64_t j = 0; j < 20; ++j) {
        scales[t * 20 + j] = static_cast<uint8_t>(t < 4 ? 60 + t + 10 * (j / 4) : 90 + j / 4);
      }
    }
    const Fp8Reblocked out = ReblockFp8TilesRef(codes, scales, n, k);
    ASSERT_EQ(out.scales.size(), 16u);
    for (int64_t i = 0; i < 16; ++i) {
      const int64_t nb = i / 8, kb = i % 8;
      const int s = nb == 0 ? 63 + 10 * static_cast<int>(kb) : 90 + static_cast<int>(kb);
      const float want = kb < 5 ? std::ldexp(1.0f, s - 127) : 0.0f;
      EXPECT_EQ(out.scales[i], want) << "float " << i;
    }
  }
  // W 1x128 (rows form, 32-row tiles): the 32 rows of a tile share a scale.
  {
    const int64_t n = 64, k = 128;
    std::vector<uint8_t> codes(n * k, 0x38), scales = {120, 121, 122, 123, 130, 100, 100, 100};
    const Fp8Reblocked out = ReblockFp8RowsRef(codes, scales, n, k, 32);
    for (int64_t r = 0; r < n; ++r) {
      EXPECT_EQ(out.scales[Fp8Vec128ScaleIndex(r, 0, n)],
                std::ldexp(1.0f, (r < 32 ? 123 : 130) - 127));
    }
    EXPECT_EQ(out.codes[0], Fp8ReblockCode(0x38, 3));  // row 0, block 0: 123 - 120
  }
}

}  // namespace
}  // namespace weir::kernels::cuda::dense
