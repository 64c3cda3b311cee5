// GPU test of Bf16Gemm: against the exact (double) product of the bf16
// operands, bit-identity across tiles, batch compositions and group counts,
// bf16 output, and bad arguments.

#include "kernels/cuda/dense/bf16_gemm_sm90.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <span>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/common/numeric_formats.h"
#include "kernels/cpu/weight_quant.h"
#include "kernels/cuda/dense/act_quant_fp8.h"
#include "kernels/cuda/dense/test_util.h"

namespace weir::kernels::cuda::dense {
namespace {

// Runs Bf16Gemm on host operands (NaN-poisoned output); empty on failure.
std::vector<float> RunGpu(const std::vector<uint16_t>& x, const std::vector<uint16_t>& w,
                          int64_t m, int64_t n, int64_t k, Fp8GemmTile tile,
                          Fp8GemmOutput output = Fp8GemmOutput::kF32, int groups = 1,
                          int64_t xs = 0, int64_t ws = 0, int64_t ys = 0) {
  DeviceBuffer<uint16_t> dx(x), dw(w);
  const int64_t y_count = groups * (ys != 0 ? ys : m * n);
  DeviceBuffer<float> y(y_count);
  if (!dx.ok() || !dw.ok() || !y.ok()) {
    ADD_FAILURE() << "cudaMalloc";
    return {};
  }
  y.Poison(0xFF);
  const absl::Status st = Bf16Gemm({.x = dx.get(), .w = dw.get(), .y = y.get(), .m = m, .n = n,
                                    .k = k, .groups = groups, .x_group_stride = xs,
                                    .w_group_stride = ws, .y_group_stride = ys,
                                    .output = output, .tile = tile},
                                   nullptr);
  if (!st.ok()) {
    ADD_FAILURE() << st;
    return {};
  }
  if (cudaError_t e = cudaDeviceSynchronize(); e != cudaSuccess) {
    ADD_FAILURE() << cudaGetErrorString(e);
    return {};
  }
  std::vector<float> out = y.Download();
  if (output == Fp8GemmOutput::kBf16) {  // widen the packed bf16 results
    std::vector<uint16_t> raw(y_count);
    std::memcpy(raw.data(), out.data(), y_count * sizeof(uint16_t));
    for (int64_t i = 0; i < y_count; ++i) out[i] = Bf16BitsToFloat(raw[i]);
  }
  return out;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b, int64_t count) {
  return a.size() >= static_cast<size_t>(count) && b.size() >= static_cast<size_t>(count) &&
         std::memcmp(a.data(), b.data(), count * sizeof(float)) == 0;
}

// Against the exact product, for shapes with partial tiles, a half last K
// step (k % 16 == 8) and long K.
TEST(Bf16GemmTest, MatchesTheExactProduct) {
  struct Shape {
    int64_t m, n, k;
  };
  for (const Shape s : {Shape{1, 1000, 4096}, Shape{37, 96, 200}, Shape{130, 300, 520},
                        Shape{8, 129, 8}}) {
    std::mt19937 rng(static_cast<uint32_t>(s.m * 31 + s.n * 7 + s.k));
    const std::vector<uint16_t> x = RandomBf16Rows(s.m, s.k, rng),
                                w = RandomBf16Rows(s.n, s.k, rng);
    const std::vector<float> y = RunGpu(x, w, s.m, s.n, s.k, Fp8GemmTile::kAuto);
    ASSERT_EQ(y.size(), static_cast<size_t>(s.m * s.n));
    const double steps = std::ceil(s.k / 16.0);
    double worst = 0;
    for (int64_t i = 0; i < s.m; ++i) {
      for (int64_t j = 0; j < s.n; ++j) {
        double exact = 0, abs_sum = 0;
        for (int64_t c = 0; c < s.k; ++c) {
          const double p = static_cast<double>(Bf16BitsToFloat(x[i * s.k + c])) *
                           Bf16BitsToFloat(w[j * s.k + c]);
          exact += p;
          abs_sum += std::fabs(p);
        }
        const double err = std::fabs(y[i * s.n + j] - exact);
        const double bound = (1e-6 + steps * std::ldexp(1.0, -22)) * abs_sum;
        ASSERT_LE(err, bound) << "m " << s.m << " n " << s.n << " k " << s.k << " at " << i
                              << "," << j;
        if (abs_sum > 0) worst = std::max(worst, err / abs_sum);
      }
    }
    std::printf("m %lld n %lld k %lld: worst |y - exact| / sum|xw| = %.3g\n",
                static_cast<long long>(s.m), static_cast<long long>(s.n),
                static_cast<long long>(s.k), worst);
  }
}

// Every tile gives the same bits; a row gives the same bits alone and in a
// batch (batch invariance).
TEST(Bf16GemmTest, BitIdenticalAcrossTilesAndBatches) {
  const int64_t m = 70, n = 200, k = 1032;
  std::mt19937 rng(11);
  const std::vector<uint16_t> x = RandomBf16Rows(m, k, rng), w = RandomBf16Rows(n, k, rng);
  const std::vector<float> want = RunGpu(x, w, m, n, k, Fp8GemmTile::kAuto);
  ASSERT_EQ(want.size(), static_cast<size_t>(m * n));
  for (Fp8GemmTile tile : kAllFp8GemmTiles) {
    EXPECT_TRUE(SameBits(RunGpu(x, w, m, n, k, tile), want, m * n))
        << "tile " << static_cast<int>(tile);
  }
  for (int64_t row : {int64_t{0}, int64_t{33}, int64_t{69}}) {
    const std::vector<uint16_t> one(x.begin() + row * k, x.begin() + (row + 1) * k);
    const std::vector<float> alone = RunGpu(one, w, 1, n, k, Fp8GemmTile::kAuto);
    ASSERT_EQ(alone.size(), static_cast<size_t>(n));
    EXPECT_EQ(std::memcmp(alone.data(), want.data() + row * n, n * sizeof(float)), 0)
        << "row " << row;
  }
}

// A grouped launch (padded strides) equals one launch per group, bit for bit;
// the bf16 output (and the fp32 rounded one) is the fp32 result rounded to
// nearest even.
TEST(Bf16GemmTest, GroupsAndBf16Output) {
  const int groups = 3;
  const int64_t m = 5, n = 64, k = 256, xs = m * k + 8, ws = n * k + 64, ys = m * n + 3;
  std::mt19937 rng(17);
  const std::vector<uint16_t> x = RandomBf16Rows(groups * xs / k + 1, k, rng),
                              w = RandomBf16Rows(groups * ws / k + 1, k, rng);
  const std::vector<float> all =
      RunGpu(x, w, m, n, k, Fp8GemmTile::kAuto, Fp8GemmOutput::kF32, groups, xs, ws, ys);
  ASSERT_EQ(all.size(), static_cast<size_t>(groups * ys));
  for (int g = 0; g < groups; ++g) {
    const std::vector<uint16_t> xg(x.begin() + g * xs, x.begin() + g * xs + m * k);
    const std::vector<uint16_t> wg(w.begin() + g * ws, w.begin() + g * ws + n * k);
    const std::vector<float> one = RunGpu(xg, wg, m, n, k, Fp8GemmTile::kAuto);
    ASSERT_EQ(one.size(), static_cast<size_t>(m * n));
    EXPECT_EQ(std::memcmp(one.data(), all.data() + g * ys, m * n * sizeof(float)), 0)
        << "group " << g;
    const std::vector<float> b16 =
        RunGpu(xg, wg, m, n, k, Fp8GemmTile::kAuto, Fp8GemmOutput::kBf16);
    const std::vector<float> rounded =
        RunGpu(xg, wg, m, n, k, Fp8GemmTile::kAuto, Fp8GemmOutput::kF32RoundedBf16);
    ASSERT_EQ(rounded.size(), static_cast<size_t>(m * n));
    for (int64_t i = 0; i < m * n; ++i) {
      ASSERT_EQ(b16[i], kernels::RoundToBf16(one[i])) << "group " << g << " element " << i;
      const float want = kernels::RoundToBf16(one[i]);
      ASSERT_EQ(std::memcmp(&rounded[i], &want, sizeof(float)), 0)
          << "fp32 rounded, group " << g << " element " << i;
    }
  }
}

// Split-K: each split is the product over its K stages from +0 (the same
// call on that slice of K alone), and y is the partials added in split
// order, then rounded per the output; every tile gives the same bits, a row
// the same alone and in a batch, a grouped call the same as each group
// alone; and the split product stays within the exact product's bound.
TEST(Bf16GemmTest, SplitKSumsTheSplitsProductsInOrder) {
  const int groups = 2;
  const int64_t m = 9, n = 96, k = 1000;  // 16 stages (the last one short)
  const int splits = 3;                   // stages [0, 5), [5, 10), [10, 16)
  std::mt19937 rng(23);
  const std::vector<uint16_t> x = RandomBf16Rows(groups * m, k, rng),
                              w = RandomBf16Rows(groups * n, k, rng);
  const int64_t mn = m * n;
  DeviceBuffer<uint16_t> dx(x), dw(w);
  DeviceBuffer<float> y(groups * mn), scratch(groups * splits * mn);
  auto run = [&](int64_t rows, const uint16_t* xp, Fp8GemmTile tile, Fp8GemmOutput output,
                 int g_count) {
    y.Poison(0xFF);
    const absl::Status st = Bf16Gemm({.x = xp,
                                      .w = dw.get(),
                                      .y = y.get(),
                                      .m = rows,
                                      .n = n,
                                      .k = k,
                                      .groups = g_count,
                                      .x_group_stride = m * k,
                                      .w_group_stride = n * k,
                                      .y_group_stride = mn,
                                      .output = output,
                                      .tile = tile,
                                      .k_splits = splits,
                                      .split_scratch = scratch.get()},
                                     nullptr);
    EXPECT_TRUE(st.ok()) << st;
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    return y.Download();
  };
  const std::vector<float> got = run(m, dx.get(), Fp8GemmTile::kAuto, Fp8GemmOutput::kF32, groups);
  ASSERT_EQ(got.size(), static_cast<size_t>(groups * mn));
  const int64_t stages = (k + 63) / 64;
  for (int g = 0; g < groups; ++g) {
    std::vector<float> want(mn, 0.0f);
    for (int s = 0; s < splits; ++s) {
      const int64_t c0 = s * stages / splits * 64, c1 = std::min(k, (s + 1) * stages / splits * 64);
      std::vector<uint16_t> xs, ws;
      for (int64_t i = 0; i < m; ++i) {
        xs.insert(xs.end(), x.begin() + (g * m + i) * k + c0, x.begin() + (g * m + i) * k + c1);
      }
      for (int64_t j = 0; j < n; ++j) {
        ws.insert(ws.end(), w.begin() + (g * n + j) * k + c0, w.begin() + (g * n + j) * k + c1);
      }
      const std::vector<float> part = RunGpu(xs, ws, m, n, c1 - c0, Fp8GemmTile::kAuto);
      ASSERT_EQ(part.size(), static_cast<size_t>(mn));
      for (int64_t e = 0; e < mn; ++e) want[e] = s == 0 ? part[e] : want[e] + part[e];
    }
    EXPECT_EQ(std::memcmp(want.data(), got.data() + g * mn, mn * sizeof(float)), 0)
        << "group " << g << ": not the splits' products added in order";
    for (int64_t i = 0; i < m; ++i) {  // within the exact product's bound
      for (int64_t j = 0; j < n; ++j) {
        double exact = 0, abs_sum = 0;
        for (int64_t c = 0; c < k; ++c) {
          const double p = static_cast<double>(Bf16BitsToFloat(x[(g * m + i) * k + c])) *
                           Bf16BitsToFloat(w[(g * n + j) * k + c]);
          exact += p;
          abs_sum += std::fabs(p);
        }
        ASSERT_LE(std::fabs(got[g * mn + i * n + j] - exact),
                  (1e-6 + std::ceil(k / 16.0) * std::ldexp(1.0, -22)) * abs_sum);
      }
    }
  }
  for (Fp8GemmTile tile : kAllFp8GemmTiles) {
    EXPECT_TRUE(SameBits(run(m, dx.get(), tile, Fp8GemmOutput::kF32, groups), got, groups * mn))
        << "tile " << static_cast<int>(tile);
  }
  EXPECT_TRUE(SameBits(run(m, dx.get(), Fp8GemmTile::kN128M128Ws, Fp8GemmOutput::kF32, groups), got,
                       groups * mn))
      << "the warp-specialized tile";
  // Rounded outputs: the fp32 sum rounded.
  const std::vector<float> rounded =
      run(m, dx.get(), Fp8GemmTile::kAuto, Fp8GemmOutput::kF32RoundedBf16, groups);
  for (int64_t e = 0; e < groups * mn; ++e) {
    const float want = kernels::RoundToBf16(got[e]);
    ASSERT_EQ(std::memcmp(&rounded[e], &want, sizeof(float)), 0) << "element " << e;
  }
  // Row 4 of group 0 alone.
  DeviceBuffer<uint16_t> one(std::vector<uint16_t>(x.begin() + 4 * k, x.begin() + 5 * k));
  const std::vector<float> alone = run(1, one.get(), Fp8GemmTile::kAuto, Fp8GemmOutput::kF32, 1);
  EXPECT_EQ(std::memcmp(alone.data(), got.data() + 4 * n, n * sizeof(float)), 0)
      << "a row alone differs from the row in its batch";
}

// The warp-specialized prefill tile (kN128M128Ws: TMA and wgmma) gives the
// mma tiles' bits: partial tiles, a half last K step and K past the last
// stage's steps (k % 64 != 0), every output form, groups with padded
// strides; kAuto takes it above 256 rows.
TEST(Bf16GemmTest, WarpSpecializedTileGivesTheMmaBits) {
  constexpr Fp8GemmTile kWs = Fp8GemmTile::kN128M128Ws;
  struct Shape {
    int64_t m, n, k;
  };
  std::mt19937 rng(29);
  for (const Shape& s :
       {Shape{1, 64, 64}, Shape{300, 200, 1032}, Shape{257, 130, 1000}, Shape{700, 1024, 4096}}) {
    const std::vector<uint16_t> x = RandomBf16Rows(s.m, s.k, rng),
                                w = RandomBf16Rows(s.n, s.k, rng);
    for (Fp8GemmOutput output :
         {Fp8GemmOutput::kF32, Fp8GemmOutput::kBf16, Fp8GemmOutput::kF32RoundedBf16}) {
      const std::vector<float> want = RunGpu(x, w, s.m, s.n, s.k, Fp8GemmTile::kN128M128, output);
      ASSERT_EQ(want.size(), static_cast<size_t>(s.m * s.n));
      EXPECT_TRUE(SameBits(RunGpu(x, w, s.m, s.n, s.k, kWs, output), want, s.m * s.n))
          << s.m << "x" << s.n << "x" << s.k << " output " << static_cast<int>(output);
    }
  }
  const int groups = 3;
  const int64_t m = 260, n = 96, k = 520, xs = m * k + 8, ws = n * k + 64, ys = m * n + 3;
  const std::vector<uint16_t> x = RandomBf16Rows(groups * xs / k + 1, k, rng),
                              w = RandomBf16Rows(groups * ws / k + 1, k, rng);
  const std::vector<float> want =
      RunGpu(x, w, m, n, k, Fp8GemmTile::kN128M128, Fp8GemmOutput::kF32, groups, xs, ws, ys);
  const std::vector<float> got =
      RunGpu(x, w, m, n, k, kWs, Fp8GemmOutput::kF32, groups, xs, ws, ys);
  ASSERT_EQ(want.size(), static_cast<size_t>(groups * ys));
  for (int g = 0; g < groups; ++g) {
    EXPECT_TRUE(SameBits(std::vector<float>(got.begin() + g * ys, got.begin() + g * ys + m * n),
                         std::vector<float>(want.begin() + g * ys, want.begin() + g * ys + m * n),
                         m * n))
        << "group " << g;
  }
  uint16_t dummy[8];
  const Bf16GemmParams big{.x = dummy, .w = dummy, .y = dummy, .m = 4096, .n = 1024, .k = 4096};
  EXPECT_EQ(ResolveBf16GemmTile(big), kWs);
  Bf16GemmParams small = big;
  small.m = 256;
  EXPECT_NE(ResolveBf16GemmTile(small), kWs);
}

// ws_m256 (the warp-specialized tile over 256 X rows a CTA, wgmma n256) and
// ws_persistent (a CTA an SM at most, taking tiles in turn), alone and
// together, give the 128-row tile's bits (which the test above holds to the
// mma tiles): partial tiles of both widths, k % 64 != 0, splits summed in
// the CTA, every output form, groups with padded strides (a CTA's tiles
// cross groups), row_role past a tile's first 128 rows (the rows of the
// other role keep the sentinel), more tiles than SMs.
TEST(Bf16GemmTest, WarpSpecializedFormsGiveTheNarrowBits) {
  struct Case {
    int64_t m, n, k;
    int groups, splits;
    Fp8GemmOutput output;
    bool roles;
  };
  std::mt19937 rng(43);
  for (const Case& c : {Case{1, 64, 64, 1, 1, Fp8GemmOutput::kF32, false},
                        Case{300, 200, 1032, 1, 1, Fp8GemmOutput::kBf16, false},
                        Case{600, 130, 1000, 1, 3, Fp8GemmOutput::kF32RoundedBf16, false},
                        Case{700, 1024, 4096, 1, 1, Fp8GemmOutput::kF32, false},
                        Case{520, 96, 520, 2, 2, Fp8GemmOutput::kF32, true},
                        Case{257, 256, 2048, 3, 4, Fp8GemmOutput::kBf16, true},
                        Case{2100, 2200, 192, 1, 1, Fp8GemmOutput::kF32RoundedBf16, false}}) {
    SCOPED_TRACE(::testing::Message()
                 << c.m << "x" << c.n << "x" << c.k << " groups " << c.groups << " splits "
                 << c.splits << " output " << static_cast<int>(c.output) << " roles " << c.roles);
    const int64_t xs = c.m * c.k + 8, ws = c.n * c.k + 64, ys = c.m * c.n + 3;
    const std::vector<uint16_t> x = RandomBf16Rows(c.groups * xs / c.k + 1, c.k, rng),
                                w = RandomBf16Rows(c.groups * ws / c.k + 1, c.k, rng);
    std::vector<int32_t> roles(c.m);
    for (int32_t& r : roles) r = static_cast<int32_t>(rng() % 2);
    DeviceBuffer<uint16_t> dx(x), dw(w);
    DeviceBuffer<int32_t> droles(roles);
    DeviceBuffer<float> narrow(c.groups * ys), wide(c.groups * ys),
        scratch(int64_t{c.groups} * c.splits * c.m * c.n);
    ASSERT_TRUE(dx.ok() && dw.ok() && droles.ok() && narrow.ok() && wide.ok() && scratch.ok());
    Bf16GemmParams p{.x = dx.get(),
                     .w = dw.get(),
                     .y = narrow.get(),
                     .m = c.m,
                     .n = c.n,
                     .k = c.k,
                     .groups = c.groups,
                     .x_group_stride = c.groups > 1 ? xs : 0,
                     .w_group_stride = c.groups > 1 ? ws : 0,
                     .y_group_stride = c.groups > 1 ? ys : 0,
                     .output = c.output,
                     .tile = Fp8GemmTile::kN128M128Ws,
                     .k_splits = c.splits,
                     .split_scratch = c.splits > 1 ? scratch.get() : nullptr,
                     .row_role = c.roles ? droles.get() : nullptr,
                     .role = 1};
    narrow.Poison(0x5A);
    ASSERT_TRUE(Bf16Gemm(p, nullptr).ok());
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const std::vector<float> a = narrow.Download();
    int64_t written = 0;
    for (const float& v : a) {
      uint32_t bits = 0;
      std::memcpy(&bits, &v, sizeof(bits));
      written += bits != 0x5A5A5A5Au;
    }
    EXPECT_GT(written, 0);  // the product wrote y
    for (const auto& [m256, persistent] : {std::pair{true, false}, {false, true}, {true, true}}) {
      Bf16GemmParams q = p;
      q.y = wide.get();
      q.ws_m256 = m256;
      q.ws_persistent = persistent;
      wide.Poison(0x5A);
      ASSERT_TRUE(Bf16Gemm(q, nullptr).ok());
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      const std::vector<float> b = wide.Download();
      ASSERT_EQ(a.size(), b.size());
      int64_t differ = 0;
      for (size_t i = 0; i < a.size(); ++i) differ += std::memcmp(&a[i], &b[i], sizeof(float)) != 0;
      EXPECT_EQ(differ, 0) << "of " << a.size() << " words, ws_m256 " << m256 << " ws_persistent "
                           << persistent;
    }
  }
}

// y_row_stride: every group's rows land side by side in one row of y ([m,
// groups, n], V4.1's u after its grouped wo_a), each element the bits of the
// packed [groups][m, n] product, the pad after each row untouched; on the
// mma tiles, the warp-specialized tile, split-K's second kernel and bf16
// output.
TEST(Bf16GemmTest, RowStrideWritesTheGroupsSideBySide) {
  constexpr int kGroups = 4;
  const int64_t n = 96, k = 520;
  std::mt19937 rng(31);
  for (const int64_t m : {int64_t{1}, int64_t{9}, int64_t{300}}) {
    const std::vector<uint16_t> x = RandomBf16Rows(kGroups * m, k, rng),
                                w = RandomBf16Rows(kGroups * n, k, rng);
    DeviceBuffer<uint16_t> dx(x), dw(w);
    const int64_t ldy = kGroups * n + 32;  // a pad after each row's groups
    DeviceBuffer<float> packed(kGroups * m * n), strided(m * ldy),
        scratch(int64_t{kGroups} * 3 * m * n);
    ASSERT_TRUE(dx.ok() && dw.ok() && packed.ok() && strided.ok() && scratch.ok());
    struct Run {
      Fp8GemmTile tile;
      int splits;
      Fp8GemmOutput output;
    };
    for (const Run& r : {Run{Fp8GemmTile::kAuto, 1, Fp8GemmOutput::kF32},
                         Run{Fp8GemmTile::kAuto, 3, Fp8GemmOutput::kF32RoundedBf16},
                         Run{Fp8GemmTile::kAuto, 3, Fp8GemmOutput::kBf16},
                         Run{Fp8GemmTile::kN128M128Ws, 1, Fp8GemmOutput::kF32},
                         Run{Fp8GemmTile::kN128M128Ws, 2, Fp8GemmOutput::kBf16}}) {
      Bf16GemmParams p{.x = dx.get(),
                       .w = dw.get(),
                       .y = packed.get(),
                       .m = m,
                       .n = n,
                       .k = k,
                       .groups = kGroups,
                       .output = r.output,
                       .tile = r.tile,
                       .k_splits = r.splits,
                       .split_scratch = r.splits > 1 ? scratch.get() : nullptr};
      packed.Poison(0xFF);
      strided.Poison(0xFF);
      ASSERT_TRUE(Bf16Gemm(p, nullptr).ok());
      p.y = strided.get();
      p.y_group_stride = n;
      p.y_row_stride = ldy;
      ASSERT_TRUE(Bf16Gemm(p, nullptr).ok());
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      const std::vector<float> want_f = packed.Download(), got_f = strided.Download();
      // Compare as the output's elements (4 or 2 bytes).
      const int bytes = Fp8GemmOutputBytes(r.output);
      const auto* want = reinterpret_cast<const uint8_t*>(want_f.data());
      const auto* got = reinterpret_cast<const uint8_t*>(got_f.data());
      int64_t differ = 0, pad_written = 0;
      for (int64_t i = 0; i < m; ++i) {
        for (int g = 0; g < kGroups; ++g) {
          differ += std::memcmp(got + (i * ldy + g * n) * bytes, want + ((g * m + i) * n) * bytes,
                                n * bytes) != 0;
        }
        for (int64_t e = kGroups * n * bytes; e < ldy * bytes; ++e) {
          pad_written += got[i * ldy * bytes + e] != 0xFF;
        }
      }
      EXPECT_EQ(differ, 0) << "m " << m << " tile " << static_cast<int>(r.tile) << " splits "
                           << r.splits << " output " << static_cast<int>(r.output);
      EXPECT_EQ(pad_written, 0) << "m " << m << " tile " << static_cast<int>(r.tile);
      // (kAuto runs the warp-specialized tile at 300 rows, which sums its
      // splits in the CTA: no second kernel, so no FP8 form.)
      if (r.splits == 1 || ResolveBf16GemmTile(p) == Fp8GemmTile::kN128M128Ws ||
          r.output == Fp8GemmOutput::kBf16) {
        continue;
      }
      // The split's second kernel writes y's FP8 form too: ActQuantFp8's
      // bytes of y as written, over each row's groups (the pad untouched).
      DeviceBuffer<uint8_t> codes(m * ldy), scales(m * ldy / 32), want_codes(m * ldy),
          want_scales(m * ldy / 32);
      codes.Poison(0xAB);
      scales.Poison(0xAB);
      p.y_codes = codes.get();
      p.y_scales = scales.get();
      ASSERT_TRUE(Bf16GemmMakesFp8(p));
      ASSERT_TRUE(Bf16Gemm(p, nullptr).ok());
      ASSERT_TRUE(ActQuantFp8({.x = strided.get(),
                               .codes = want_codes.get(),
                               .scales = want_scales.get(),
                               .rows = m,
                               .cols = ldy},
                              nullptr)
                      .ok());
      const std::vector<uint8_t> gc = codes.Download(), wc = want_codes.Download(),
                                 gs = scales.Download(), ws = want_scales.Download();
      int64_t code_differ = 0, scale_differ = 0, pad_touched = 0;
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t c = 0; c < ldy; ++c) {
          if (c < kGroups * n) {
            code_differ += gc[i * ldy + c] != wc[i * ldy + c];
          } else {
            pad_touched += gc[i * ldy + c] != 0xAB;
          }
        }
        for (int64_t c = 0; c < kGroups * n / 32; ++c) {
          scale_differ += gs[i * ldy / 32 + c] != ws[i * ldy / 32 + c];
        }
      }
      EXPECT_EQ(code_differ, 0) << "m " << m << " output " << static_cast<int>(r.output);
      EXPECT_EQ(scale_differ, 0) << "m " << m << " output " << static_cast<int>(r.output);
      EXPECT_EQ(pad_touched, 0) << "m " << m;
      p.y_codes = p.y_scales = nullptr;
    }
  }
}

// The weight as FP8 codes + UE8M0 tile scales (w_codes, V4.1's wo_a as the
// checkpoint stores it): every tile, split and output gives the bits of the
// product over the bf16 values code x scale, which Fp8WeightBf16 writes and
// the CPU's DequantizeFp8Weight + RoundToBf16 give. Codes span the e4m3
// range (zeros of both signs and subnormals included, no NaN); the groups lie
// apart with padding; a partial W tile (n = 70) and a partial last stage (k
// % 64 == 32); u's layout of the decoder's direct wo_a with y's FP8 form.
TEST(Bf16GemmTest, Fp8WeightsGiveTheProductOverTheirBf16Values) {
  constexpr int kGroups = 3;
  std::mt19937 rng(77);
  for (const auto [n, k] : {std::pair<int64_t, int64_t>{96, 512}, {70, 96}}) {
    SCOPED_TRACE(::testing::Message() << "n " << n << " k " << k);
    const int64_t scale_count = Bf16GemmWeightScaleBytes(n, k);
    const int64_t cs = n * k + 256, ss = scale_count + 8;  // padded group strides
    std::vector<uint8_t> codes(kGroups * cs, 0x55), scales(kGroups * ss, 0x55);
    std::vector<uint16_t> w(kGroups * n * k);
    for (int g = 0; g < kGroups; ++g) {
      for (int64_t i = 0; i < n * k; ++i) {
        uint8_t c = static_cast<uint8_t>(rng());
        if ((c & 0x7F) == 0x7F) c ^= 1;  // e4m3 NaN -> 448
        codes[g * cs + i] = c;
      }
      for (int64_t i = 0; i < scale_count; ++i) scales[g * ss + i] = 117 + rng() % 14;
      std::vector<float> values(n * k);
      ASSERT_TRUE(
          cpu::DequantizeFp8Weight(std::span<const uint8_t>(codes).subspan(g * cs, n * k),
                                   std::span<const uint8_t>(scales).subspan(g * ss, scale_count), n,
                                   k, 32, values)
              .ok());
      for (int64_t i = 0; i < n * k; ++i) w[g * n * k + i] = FloatToBf16Bits(values[i]);
    }
    DeviceBuffer<uint8_t> dcodes(codes), dscales(scales);
    DeviceBuffer<uint16_t> dw(w), widened(w.size());
    ASSERT_TRUE(dcodes.ok() && dscales.ok() && dw.ok() && widened.ok());
    widened.Poison(0xFF);
    ASSERT_TRUE(Fp8WeightBf16({.codes = dcodes.get(),
                               .scales = dscales.get(),
                               .out = widened.get(),
                               .rows = n,
                               .cols = k,
                               .groups = kGroups,
                               .code_group_stride = cs,
                               .scale_group_stride = ss},
                              nullptr)
                    .ok());
    EXPECT_EQ(widened.Download(), w);
    for (const int64_t m : {int64_t{1}, int64_t{9}, int64_t{300}}) {
      const std::vector<uint16_t> x = RandomBf16Rows(kGroups * m, k, rng);
      DeviceBuffer<uint16_t> dx(x);
      const int64_t ldy = kGroups * n;
      DeviceBuffer<float> want(m * ldy), got(m * ldy), scratch(int64_t{kGroups} * 3 * m * n);
      DeviceBuffer<uint8_t> want_codes(m * ldy), got_codes(m * ldy), want_sc(m * ldy / 32),
          got_sc(m * ldy / 32);
      ASSERT_TRUE(dx.ok() && want.ok() && got.ok() && scratch.ok());
      struct Run {
        Fp8GemmTile tile;
        int splits;
        Fp8GemmOutput output;
        bool u_layout;  // y as [m, groups, n] (the direct wo_a) and, split, its FP8 form
      };
      for (const Run& r : {Run{Fp8GemmTile::kAuto, 1, Fp8GemmOutput::kF32, false},
                           Run{Fp8GemmTile::kN16M8, 1, Fp8GemmOutput::kF32, false},
                           Run{Fp8GemmTile::kN64M8S3, 2, Fp8GemmOutput::kF32, false},
                           Run{Fp8GemmTile::kN128M128, 1, Fp8GemmOutput::kBf16, false},
                           Run{Fp8GemmTile::kAuto, 3, Fp8GemmOutput::kF32RoundedBf16, true}}) {
        SCOPED_TRACE(::testing::Message() << "m " << m << " tile " << static_cast<int>(r.tile)
                                          << " splits " << r.splits);
        const bool fp8_out = r.u_layout && n % 32 == 0;
        Bf16GemmParams p{.x = dx.get(),
                         .w = dw.get(),
                         .y = want.get(),
                         .m = m,
                         .n = n,
                         .k = k,
                         .groups = kGroups,
                         .y_group_stride = r.u_layout ? n : 0,
                         .y_row_stride = r.u_layout ? ldy : 0,
                         .output = r.output,
                         .tile = r.tile,
                         .k_splits = std::min<int>(r.splits, (k + 63) / 64),
                         .split_scratch = r.splits > 1 ? scratch.get() : nullptr,
                         .y_codes = fp8_out ? want_codes.get() : nullptr,
                         .y_scales = fp8_out ? want_sc.get() : nullptr};
        if (p.y_codes != nullptr && !Bf16GemmMakesFp8(p)) p.y_codes = p.y_scales = nullptr;
        want.Poison(0xFF);
        got.Poison(0xFF);
        ASSERT_TRUE(Bf16Gemm(p, nullptr).ok());
        p.w = nullptr;
        p.w_codes = dcodes.get();
        p.w_scales = dscales.get();
        p.w_group_stride = cs;
        p.w_scales_group_stride = ss;
        p.y = got.get();
        if (p.y_codes != nullptr) {
          p.y_codes = got_codes.get();
          p.y_scales = got_sc.get();
        }
        EXPECT_NE(ResolveBf16GemmTile(p), Fp8GemmTile::kN128M128Ws);
        ASSERT_TRUE(Bf16Gemm(p, nullptr).ok());
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        EXPECT_TRUE(SameBits(got.Download(), want.Download(), m * ldy));  // bf16 out: + poison
        if (p.y_codes != nullptr) {
          EXPECT_EQ(got_codes.Download(), want_codes.Download());
          EXPECT_EQ(got_sc.Download(), want_sc.Download());
        }
      }
    }
  }
}

// row_role: a call writes only the rows of its role, each with the bits of
// the call without row_role, in every group, and leaves the other rows as
// they were; a second call for the other role completes y. On the mma tiles
// (kAuto at 37 rows and three fixed tiles), split-K's second kernel and
// the warp-specialized tile (300 rows, its splits summed in the CTA), for
// fp32, rounded fp32 and bf16 outputs.
TEST(Bf16GemmTest, RowRoleWritesOnlyItsRows) {
  constexpr int kGroups = 2;
  const int64_t n = 96, k = 520;  // 9 stages of 64
  std::mt19937 rng(41);
  for (const int64_t m : {int64_t{37}, int64_t{300}}) {
    const std::vector<uint16_t> x = RandomBf16Rows(kGroups * m, k, rng),
                                w = RandomBf16Rows(kGroups * n, k, rng);
    std::vector<int32_t> roles(m);
    for (int32_t& r : roles) r = static_cast<int32_t>(rng() % 2);
    roles[0] = 1;  // both roles at the ends
    roles[m - 1] = 0;
    DeviceBuffer<uint16_t> dx(x), dw(w);
    DeviceBuffer<int32_t> droles(roles);
    DeviceBuffer<float> want(kGroups * m * n), got(kGroups * m * n),
        scratch(int64_t{kGroups} * 3 * m * n);
    ASSERT_TRUE(dx.ok() && dw.ok() && droles.ok() && want.ok() && got.ok() && scratch.ok());
    struct Run {
      Fp8GemmTile tile;
      int splits;
      Fp8GemmOutput output;
    };
    for (const Run& r : {Run{Fp8GemmTile::kAuto, 1, Fp8GemmOutput::kF32},
                         Run{Fp8GemmTile::kAuto, 1, Fp8GemmOutput::kBf16},
                         Run{Fp8GemmTile::kN16M8, 1, Fp8GemmOutput::kF32RoundedBf16},
                         Run{Fp8GemmTile::kN16M64, 1, Fp8GemmOutput::kF32},
                         Run{Fp8GemmTile::kN128M128, 1, Fp8GemmOutput::kBf16},
                         Run{Fp8GemmTile::kAuto, 3, Fp8GemmOutput::kF32},
                         Run{Fp8GemmTile::kAuto, 3, Fp8GemmOutput::kBf16},
                         Run{Fp8GemmTile::kN128M128Ws, 1, Fp8GemmOutput::kF32},
                         Run{Fp8GemmTile::kN128M128Ws, 2, Fp8GemmOutput::kBf16}}) {
      Bf16GemmParams p{.x = dx.get(),
                       .w = dw.get(),
                       .y = want.get(),
                       .m = m,
                       .n = n,
                       .k = k,
                       .groups = kGroups,
                       .output = r.output,
                       .tile = r.tile,
                       .k_splits = r.splits,
                       .split_scratch = r.splits > 1 ? scratch.get() : nullptr};
      SCOPED_TRACE(::testing::Message()
                   << "m " << m << " tile " << static_cast<int>(ResolveBf16GemmTile(p))
                   << " splits " << r.splits << " output " << static_cast<int>(r.output));
      want.Poison(0xFF);
      got.Poison(0x5A);  // the sentinel
      ASSERT_TRUE(Bf16Gemm(p, nullptr).ok());
      p.y = got.get();
      p.row_role = droles.get();
      p.role = 1;
      ASSERT_TRUE(Bf16Gemm(p, nullptr).ok());
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      const int bytes = Fp8GemmOutputBytes(r.output);
      const std::vector<float> want_f = want.Download();
      std::vector<float> got_f = got.Download();
      const auto row_of = [&](const std::vector<float>& v, int g, int64_t i) {
        return reinterpret_cast<const uint8_t*>(v.data()) + (g * m + i) * n * bytes;
      };
      std::vector<uint8_t> sentinel(n * bytes, 0x5A);
      int64_t differ = 0, touched = 0;
      for (int g = 0; g < kGroups; ++g) {
        for (int64_t i = 0; i < m; ++i) {
          if (roles[i] == 1) {
            differ += std::memcmp(row_of(got_f, g, i), row_of(want_f, g, i), n * bytes) != 0;
          } else {
            touched += std::memcmp(row_of(got_f, g, i), sentinel.data(), n * bytes) != 0;
          }
        }
      }
      EXPECT_EQ(differ, 0) << "rows of the role without the unmasked bits";
      EXPECT_EQ(touched, 0) << "rows of the other role written";
      // The other role's call completes y: the unmasked product, every byte
      // of its groups.
      p.role = 0;
      ASSERT_TRUE(Bf16Gemm(p, nullptr).ok());
      got_f = got.Download();
      EXPECT_EQ(std::memcmp(got_f.data(), want_f.data(), kGroups * m * n * bytes), 0)
          << "the two roles' calls together differ from one call";
    }
  }
}

TEST(Bf16GemmTest, RefusesBadArguments) {
  DeviceBuffer<uint16_t> b(1024);
  DeviceBuffer<float> y(1024);
  const Bf16GemmParams good{.x = b.get(), .w = b.get(), .y = y.get(), .m = 2, .n = 4, .k = 16};
  EXPECT_TRUE(Bf16Gemm(good, nullptr).ok());
  Bf16GemmParams p = good;
  p.k = 12;
  EXPECT_EQ(Bf16Gemm(p, nullptr).code(), absl::StatusCode::kInvalidArgument);
  p = good;
  p.x = b.get() + 1;
  EXPECT_EQ(Bf16Gemm(p, nullptr).code(), absl::StatusCode::kInvalidArgument);
  p = good;
  p.w = nullptr;
  EXPECT_EQ(Bf16Gemm(p, nullptr).code(), absl::StatusCode::kInvalidArgument);
  p = good;
  p.y_row_stride = 3;  // below n
  EXPECT_EQ(Bf16Gemm(p, nullptr).code(), absl::StatusCode::kInvalidArgument);
  // FP8 weights: w or w_codes, not both; k a multiple of 32; scales needed.
  DeviceBuffer<uint8_t> codes(4096);
  p = good;
  p.k = 32;
  p.w = nullptr;
  p.w_codes = codes.get();
  p.w_scales = codes.get();
  EXPECT_TRUE(Bf16Gemm(p, nullptr).ok());
  p.w = b.get();
  EXPECT_EQ(Bf16Gemm(p, nullptr).code(), absl::StatusCode::kInvalidArgument);
  p.w = nullptr;
  p.k = 16;
  EXPECT_EQ(Bf16Gemm(p, nullptr).code(), absl::StatusCode::kInvalidArgument);
  p.k = 32;
  p.w_scales = nullptr;
  EXPECT_EQ(Bf16Gemm(p, nullptr).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

}  // namespace
}  // namespace weir::kernels::cuda::dense
