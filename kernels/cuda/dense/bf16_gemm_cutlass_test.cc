// GPU test of Bf16GemmCutlass: every element equal to Bf16Gemm's unsplit
// product of the same operands (the same fp32 chain over K: bit for bit, the
// sign of an exact zero aside), for one product and for groups, fp32,
// rounded-fp32 and bf16 outputs, a row stride with the groups side by side, partial tiles in
// every dimension; a row's values whatever the rows beside it; bad
// arguments. Bf16GemmCutlassTakes' rules run on the CPU too
// (bf16_gemm_params_test).

#include "kernels/cuda/dense/bf16_gemm_cutlass.h"

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/common/numeric_formats.h"
#include "kernels/cuda/dense/bf16_gemm_sm90.h"
#include "kernels/cuda/dense/test_util.h"

namespace weir::kernels::cuda::dense {
namespace {

// Elements of `bytes` bytes (4: fp32, 2: bf16) that differ between a and b,
// +0 and -0 counted equal; `zeros` counts those sign-of-zero pairs.
int64_t Differing(const std::vector<float>& a, const std::vector<float>& b, int64_t count,
                  int bytes, int64_t* zeros) {
  const auto* pa = reinterpret_cast<const uint8_t*>(a.data());
  const auto* pb = reinterpret_cast<const uint8_t*>(b.data());
  int64_t differ = 0;
  for (int64_t i = 0; i < count; ++i) {
    uint32_t x = 0, y = 0;
    std::memcpy(&x, pa + i * bytes, bytes);
    std::memcpy(&y, pb + i * bytes, bytes);
    if (x == y) continue;
    const uint32_t sign = bytes == 4 ? 0x80000000u : 0x8000u;
    if ((x | sign) == sign && (y | sign) == sign) {
      ++*zeros;
      continue;
    }
    ++differ;
  }
  return differ;
}

struct Shape {
  int64_t m, n, k;
  int groups;
};

// CUTLASS against Bf16Gemm (k_splits 1) on the same device operands, over
// both CTA tiles (cutlass_tile_n 256 and 128) and the shape's own choice.
TEST(Bf16GemmCutlassTest, GivesTheUnsplitProductsBits) {
  std::mt19937 rng(2027);
  for (const Shape& s :
       {Shape{1, 256, 512, 1}, Shape{7, 72, 136, 1}, Shape{300, 320, 768, 1},
        Shape{1000, 1280, 5120, 1}, Shape{513, 5120, 2304, 1}, Shape{129, 1024, 4096, 3}}) {
    for (const Fp8GemmOutput output :
         {Fp8GemmOutput::kF32, Fp8GemmOutput::kF32RoundedBf16, Fp8GemmOutput::kBf16}) {
      const std::vector<uint16_t> x = RandomBf16Rows(s.groups * s.m, s.k, rng),
                                  w = RandomBf16Rows(s.groups * s.n, s.k, rng);
      DeviceBuffer<uint16_t> dx(x), dw(w);
      const int64_t count = s.groups * s.m * s.n;
      DeviceBuffer<float> want(count), got(count);
      ASSERT_TRUE(dx.ok() && dw.ok() && want.ok() && got.ok());
      want.Poison(0xFF);
      got.Poison(0xFF);
      Bf16GemmParams p{.x = dx.get(),
                       .w = dw.get(),
                       .y = want.get(),
                       .m = s.m,
                       .n = s.n,
                       .k = s.k,
                       .groups = s.groups,
                       .output = output};
      ASSERT_TRUE(Bf16Gemm(p, nullptr).ok());
      p.y = got.get();
      ASSERT_TRUE(Bf16GemmCutlassTakes(p));
      for (const int tile_n : {0, 128, -1}) {
        got.Poison(0xFF);
        p.cutlass_tile_n = tile_n;
        const absl::Status st = Bf16GemmCutlass(p, nullptr);
        ASSERT_TRUE(st.ok()) << st;
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        int64_t zeros = 0;
        EXPECT_EQ(
            Differing(want.Download(), got.Download(), count, Fp8GemmOutputBytes(output), &zeros),
            0)
            << "m " << s.m << " n " << s.n << " k " << s.k << " groups " << s.groups << " output "
            << static_cast<int>(output) << " tile n " << tile_n;
        EXPECT_LE(zeros, count / 1000) << "more signed zeros than chance gives";
      }
    }
  }
}

// The groups side by side in each row (y_row_stride, V4.1's grouped wo_a
// layout): the packed groups' values, the row's pad untouched.
TEST(Bf16GemmCutlassTest, RowStrideWritesTheGroupsSideBySide) {
  constexpr int kGroups = 4;
  const int64_t m = 300, n = 96, k = 520, ldy = kGroups * n + 32;
  std::mt19937 rng(31);
  const std::vector<uint16_t> x = RandomBf16Rows(kGroups * m, k, rng),
                              w = RandomBf16Rows(kGroups * n, k, rng);
  DeviceBuffer<uint16_t> dx(x), dw(w);
  DeviceBuffer<float> packed(kGroups * m * n), strided(m * ldy);
  ASSERT_TRUE(dx.ok() && dw.ok() && packed.ok() && strided.ok());
  packed.Poison(0xFF);
  strided.Poison(0xFF);
  Bf16GemmParams p{
      .x = dx.get(), .w = dw.get(), .y = packed.get(), .m = m, .n = n, .k = k, .groups = kGroups};
  ASSERT_TRUE(Bf16GemmCutlass(p, nullptr).ok());
  p.y = strided.get();
  p.y_group_stride = n;
  p.y_row_stride = ldy;
  ASSERT_TRUE(Bf16GemmCutlassTakes(p));
  ASSERT_TRUE(Bf16GemmCutlass(p, nullptr).ok());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<float> want = packed.Download(), got = strided.Download();
  int64_t differ = 0, pad_written = 0;
  for (int64_t i = 0; i < m; ++i) {
    for (int g = 0; g < kGroups; ++g) {
      differ += std::memcmp(&got[i * ldy + g * n], &want[(g * m + i) * n], n * 4) != 0;
    }
    for (int64_t e = kGroups * n; e < ldy; ++e) {
      uint32_t b;
      std::memcpy(&b, &got[i * ldy + e], 4);
      pad_written += b != 0xFFFFFFFFu;
    }
  }
  EXPECT_EQ(differ, 0);
  EXPECT_EQ(pad_written, 0);
}

// A row's values do not depend on the rows beside it: rows 0 .. 4 of a
// 4,096-row product equal the same rows run alone (5 rows).
TEST(Bf16GemmCutlassTest, RowsAreBatchInvariant) {
  const int64_t n = 1280, k = 5120;
  std::mt19937 rng(5);
  const std::vector<uint16_t> x = RandomBf16Rows(4096, k, rng), w = RandomBf16Rows(n, k, rng);
  DeviceBuffer<uint16_t> dx(x), dw(w);
  DeviceBuffer<float> big(4096 * n), small(5 * n);
  ASSERT_TRUE(dx.ok() && dw.ok() && big.ok() && small.ok());
  Bf16GemmParams p{.x = dx.get(), .w = dw.get(), .y = big.get(), .m = 4096, .n = n, .k = k};
  ASSERT_TRUE(Bf16GemmCutlass(p, nullptr).ok());
  p.y = small.get();
  p.m = 5;
  ASSERT_TRUE(Bf16GemmCutlass(p, nullptr).ok());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<float> a = big.Download(), b = small.Download();
  EXPECT_EQ(std::memcmp(a.data(), b.data(), 5 * n * 4), 0);
}

TEST(Bf16GemmCutlassTest, RefusesWhatItDoesNotTake) {
  DeviceBuffer<uint16_t> x(64 * 128), w(64 * 128);
  DeviceBuffer<float> y(64 * 64 * 2), scratch(64 * 64 * 2);
  DeviceBuffer<int32_t> roles(64);
  ASSERT_TRUE(x.ok() && w.ok() && y.ok() && scratch.ok() && roles.ok());
  const Bf16GemmParams ok{.x = x.get(), .w = w.get(), .y = y.get(), .m = 64, .n = 64, .k = 128};
  for (int c = 1; c < 4; ++c) {
    Bf16GemmParams p = ok;
    if (c == 1) p.k_splits = 2, p.split_scratch = scratch.get();
    if (c == 2) p.row_role = roles.get(), p.role = 1;
    if (c == 3) p.x = nullptr;
    EXPECT_EQ(Bf16GemmCutlass(p, nullptr).code(), absl::StatusCode::kInvalidArgument) << c;
  }
  EXPECT_TRUE(Bf16GemmCutlass(ok, nullptr).ok());
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

}  // namespace
}  // namespace weir::kernels::cuda::dense
