// DotRows against an exact (double) product with the header's bound, and
// batch invariance: every row alone gives the bits it gives in a batch of 37
// (both tile heights). GPU machine only (tag gpu).
#include "kernels/cuda/decode/dot_rows.h"

#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/decode/test_util.h"
#include "kernels/cuda/dense/row_stable_matmul.h"

namespace weir::kernels::cuda::decode {
namespace {

using testing::DeviceBuffer;

std::vector<float> Random(size_t n, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& f : v) f = normal(rng);
  return v;
}

class DotRowsShapes : public ::testing::TestWithParam<std::tuple<int64_t, int64_t>> {};

TEST_P(DotRowsShapes, BoundedAndBatchInvariant) {
  const auto [out, k] = GetParam();
  constexpr int64_t kRows = 37;
  std::mt19937 rng(static_cast<uint32_t>(out * 131 + k));
  const std::vector<float> x = Random(kRows * k, rng), w = Random(out * k, rng);
  DeviceBuffer<float> dx(x), dw(w), dy(kRows * out), dy1(out);
  dy.Poison();
  ASSERT_TRUE(DotRows({.x = dx.get(), .w = dw.get(), .y = dy.get(), .rows = kRows, .out = out,
                       .k = k},
                      nullptr)
                  .ok());
  const std::vector<float> y = dy.Download();
  double worst = 0;
  for (int64_t r = 0; r < kRows; ++r) {
    for (int64_t j = 0; j < out; ++j) {
      double exact = 0, mag = 0;
      for (int64_t c = 0; c < k; ++c) {
        exact += static_cast<double>(x[r * k + c]) * w[j * k + c];
        mag += std::fabs(static_cast<double>(x[r * k + c]) * w[j * k + c]);
      }
      const double bound = (static_cast<double>(k) / 128 + 12) * std::ldexp(1.0, -24) * mag;
      const double err = std::fabs(y[r * out + j] - exact);
      ASSERT_LE(err, bound) << "row " << r << " col " << j;
      worst = std::max(worst, err / std::max(mag, 1e-30));
    }
  }
  // Row r alone (the 1-row tile) and within the batch of 37 (32-row tiles).
  for (int64_t r : {int64_t{0}, int64_t{5}, int64_t{31}, int64_t{32}, kRows - 1}) {
    dy1.Poison();
    ASSERT_TRUE(DotRows({.x = dx.get() + r * k, .w = dw.get(), .y = dy1.get(), .rows = 1,
                         .out = out, .k = k},
                        nullptr)
                    .ok());
    const std::vector<float> y1 = dy1.Download();
    for (int64_t j = 0; j < out; ++j) {
      ASSERT_EQ(std::memcmp(&y1[j], &y[r * out + j], sizeof(float)), 0)
          << "row " << r << " col " << j << ": " << y1[j] << " alone, " << y[r * out + j]
          << " in the batch";
    }
  }
  std::printf("out %lld k %lld: worst |y - exact| / sum|x w| = %.3g\n",
              static_cast<long long>(out), static_cast<long long>(k), worst);
}

INSTANTIATE_TEST_SUITE_P(Shapes, DotRowsShapes,
                         ::testing::Values(std::make_tuple(int64_t{1}, int64_t{4}),
                                           std::make_tuple(int64_t{24}, int64_t{100}),
                                           std::make_tuple(int64_t{24}, int64_t{4096}),
                                           std::make_tuple(int64_t{48}, int64_t{5120}),
                                           std::make_tuple(int64_t{3}, int64_t{20480})));

// RowStableDot keeps RowStableMatmul's bits (one quad per element instead of
// its tiles), for any k, at 1 and at 37 rows.
TEST(RowStableDotTest, BitIdenticalToRowStableMatmul) {
  // k % 4 == 0 takes the staged kernel (shared-memory ring); 1, 7 and the
  // misaligned x below the quad-per-element one; 40 columns span two CTAs,
  // and 4100 leaves a partial last chunk.
  for (int64_t k : {int64_t{1}, int64_t{7}, int64_t{4096}, int64_t{4100}, int64_t{20480}}) {
    for (int64_t rows : {int64_t{1}, int64_t{37}, int64_t{300}}) {  // both staged shapes
     for (int64_t kOut : {int64_t{24}, int64_t{40}}) {
      std::mt19937 rng(static_cast<uint32_t>(k * 7 + rows));
      const std::vector<float> x = Random(rows * k, rng), w = Random(kOut * k, rng);
      DeviceBuffer<float> dx(x), dw(w), want(rows * kOut), got(rows * kOut);
      want.Poison();
      got.Poison();
      ASSERT_TRUE(dense::RowStableMatmul({.x = dx.get(), .w = dw.get(), .y = want.get(),
                                          .rows = rows, .out = kOut, .in = k},
                                         nullptr)
                      .ok());
      ASSERT_TRUE(RowStableDot({.x = dx.get(), .w = dw.get(), .y = got.get(), .rows = rows,
                                .out = kOut, .k = k},
                               nullptr)
                      .ok());
      const std::vector<float> a = want.Download(), b = got.Download();
      EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0)
          << "k " << k << " rows " << rows << " out " << kOut;
     }
    }
  }
}

// Every staged tile (rows x columns per CTA, chunk, ring depth) keeps the
// bits: partial row and column tiles, a partial last chunk, one and many
// chunks.
TEST(RowStableDotTest, EveryTileKeepsTheBits) {
  for (int64_t k : {int64_t{4100}, int64_t{20480}}) {
    for (int64_t rows : {int64_t{1}, int64_t{5}, int64_t{37}}) {
      const int64_t kOut = rows == 5 ? 40 : 24;
      std::mt19937 rng(static_cast<uint32_t>(k * 3 + rows));
      const std::vector<float> x = Random(rows * k, rng), w = Random(kOut * k, rng);
      DeviceBuffer<float> dx(x), dw(w), want(rows * kOut), got(rows * kOut);
      ASSERT_TRUE(dense::RowStableMatmul({.x = dx.get(), .w = dw.get(), .y = want.get(),
                                          .rows = rows, .out = kOut, .in = k},
                                         nullptr)
                      .ok());
      const std::vector<float> a = want.Download();
      for (int tile = 0; tile < kRowStableDotTiles; ++tile) {
        got.Poison();
        ASSERT_TRUE(RowStableDotWithTile({.x = dx.get(), .w = dw.get(), .y = got.get(),
                                          .rows = rows, .out = kOut, .k = k},
                                         tile, nullptr)
                        .ok());
        const std::vector<float> b = got.Download();
        EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0)
            << "tile " << tile << " k " << k << " rows " << rows << " out " << kOut;
      }
    }
  }
  DeviceBuffer<float> b(64);
  EXPECT_FALSE(RowStableDotWithTile({.x = b.get(), .w = b.get(), .y = b.get(), .rows = 1,
                                     .out = 1, .k = 8},
                                    kRowStableDotTiles, nullptr)
                   .ok());
  EXPECT_FALSE(RowStableDotWithTile({.x = b.get() + 1, .w = b.get(), .y = b.get(), .rows = 1,
                                     .out = 1, .k = 8},
                                    0, nullptr)
                   .ok());
}

// The staged kernel needs 16-byte aligned rows; a misaligned x takes the
// quad-per-element kernel, with the same bits.
TEST(RowStableDotTest, MisalignedInputKeepsTheBits) {
  constexpr int64_t kRows = 3, kOut = 24, kK = 20480;
  std::mt19937 rng(5);
  const std::vector<float> x = Random(kRows * kK + 1, rng), w = Random(kOut * kK, rng);
  DeviceBuffer<float> dx(x), dw(w), want(kRows * kOut), got(kRows * kOut);
  ASSERT_TRUE(dense::RowStableMatmul({.x = dx.get() + 1, .w = dw.get(), .y = want.get(),
                                      .rows = kRows, .out = kOut, .in = kK},
                                     nullptr)
                  .ok());
  ASSERT_TRUE(RowStableDot({.x = dx.get() + 1, .w = dw.get(), .y = got.get(), .rows = kRows,
                            .out = kOut, .k = kK},
                           nullptr)
                  .ok());
  const std::vector<float> a = want.Download(), b = got.Download();
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
}

TEST(DotRowsTest, RefusesBadShapes) {
  DeviceBuffer<float> b(64);
  EXPECT_FALSE(DotRows({.x = b.get(), .w = b.get(), .y = b.get(), .rows = 1, .out = 1, .k = 6},
                       nullptr)
                   .ok());
  EXPECT_FALSE(DotRows({.x = b.get() + 1, .w = b.get(), .y = b.get(), .rows = 1, .out = 1,
                        .k = 4},
                       nullptr)
                   .ok());
  EXPECT_FALSE(DotRows({.x = nullptr, .w = b.get(), .y = b.get(), .rows = 1, .out = 1, .k = 4},
                       nullptr)
                   .ok());
  EXPECT_TRUE(DotRows({.k = 4}, nullptr).ok());  // nothing to do
}

}  // namespace
}  // namespace weir::kernels::cuda::decode
