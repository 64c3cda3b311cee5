// GPU test of ActQuantFp8: codes and scales bit-identical to
// kernels/cpu/quant.h QuantizeFp8, for fp32 and bf16 inputs; and of
// Fp8ActBf16: back to the CPU's dequantized values in bf16, bit for bit.

#include "kernels/cuda/dense/act_quant_fp8.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/common/numeric_formats.h"
#include "kernels/cpu/quant.h"
#include "kernels/cuda/dense/test_util.h"

namespace weir::kernels::cuda::dense {
namespace {

// rows x cols values, each 32-block with its own magnitude 2^-60 .. 2^60
// (the amax floor 1e-4 and huge scales both hit), plus edge blocks.
std::vector<float> Inputs(int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-60, 60);
  std::vector<float> x(rows * cols);
  for (int64_t b = 0; b < rows * cols / 32; ++b) {
    const float s = std::ldexp(1.0f, exponent(rng));
    for (int i = 0; i < 32; ++i) x[b * 32 + i] = normal(rng) * s;
  }
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  for (int i = 0; i < 32; ++i) x[i] = 0.0f;                           // zero block
  for (int i = 0; i < 32; ++i) x[32 + i] = i % 3 ? -0.0f : 0.0f;      // signed zeros
  x[64 + 7] = nan;                                                    // NaN block
  x[96 + 31] = -inf;                                                  // Inf block
  for (int i = 0; i < 32; ++i) x[128 + i] = i % 2 ? 448.0f : -3e38f;  // saturation
  for (int i = 0; i < 32; ++i) x[160 + i] = 1e-42f * (i - 16);        // fp32 subnormals
  for (int i = 0; i < 32; ++i) x[192 + i] = 1.0f + i * 0.0625f;       // ties at e4m3 steps
  for (int i = 0; i < 32; ++i) x[224 + i] = 5e-5f * (i % 5 - 2);      // below the amax floor
  return x;
}

struct Quantized {
  std::vector<uint8_t> codes, scales;
};

Quantized Cpu(const std::vector<float>& x) {
  Quantized q{std::vector<uint8_t>(x.size()), std::vector<uint8_t>(x.size() / 32)};
  EXPECT_TRUE(cpu::QuantizeFp8(x, 32, q.codes, q.scales).ok());
  return q;
}

Quantized Gpu(const void* host, size_t bytes, ActDtype dtype, int64_t rows, int64_t cols) {
  DeviceBuffer<uint8_t> x(static_cast<int64_t>(bytes)), codes(rows * cols),
      scales(rows * cols / 32);
  EXPECT_TRUE(x.ok() && codes.ok() && scales.ok());
  cudaMemcpy(x.get(), host, bytes, cudaMemcpyHostToDevice);
  codes.Poison(0xAB);
  scales.Poison(0xAB);
  const absl::Status status = ActQuantFp8({.x = x.get(),
                                           .dtype = dtype,
                                           .codes = codes.get(),
                                           .scales = scales.get(),
                                           .rows = rows,
                                           .cols = cols},
                                          nullptr);
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  return {codes.Download(), scales.Download()};
}

void ExpectSame(const Quantized& got, const Quantized& want, const char* what) {
  int64_t code_mismatches = 0, scale_mismatches = 0, first = -1;
  for (size_t i = 0; i < want.codes.size(); ++i) {
    if (got.codes[i] != want.codes[i]) {
      if (first < 0) first = static_cast<int64_t>(i);
      ++code_mismatches;
    }
  }
  for (size_t i = 0; i < want.scales.size(); ++i)
    scale_mismatches += got.scales[i] != want.scales[i];
  EXPECT_EQ(code_mismatches, 0) << what << ", first at " << first;
  EXPECT_EQ(scale_mismatches, 0) << what;
  EXPECT_EQ(got.scales[2], 0xFF) << what;  // NaN block
  EXPECT_EQ(got.scales[3], 0xFF) << what;  // Inf block
}

TEST(ActQuantFp8Test, Fp32BitIdenticalToTheCpu) {
  for (auto [rows, cols] :
       {std::pair<int64_t, int64_t>{1, 256}, {3, 4096}, {129, 5120}, {7, 32 * 9}}) {
    const std::vector<float> x = Inputs(rows, cols, static_cast<uint32_t>(rows * cols));
    ExpectSame(Gpu(x.data(), x.size() * 4, ActDtype::kF32, rows, cols), Cpu(x), "fp32");
  }
}

TEST(ActQuantFp8Test, Bf16BitIdenticalToTheCpuOnWidenedValues) {
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{1, 256}, {65, 2048}, {5, 32 * 11}}) {
    const std::vector<float> x = Inputs(rows, cols, static_cast<uint32_t>(rows + cols));
    std::vector<uint16_t> bits(x.size());
    std::vector<float> widened(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      bits[i] = FloatToBf16Bits(x[i]);
      widened[i] = Bf16BitsToFloat(bits[i]);
    }
    ExpectSame(Gpu(bits.data(), bits.size() * 2, ActDtype::kBf16, rows, cols), Cpu(widened),
               "bf16");
  }
}

// With row_count (a device count read in the launch), the rows before it get
// the bits of the whole launch and the rows at and past it stay untouched;
// counts past rows and below 0 clamp.
TEST(ActQuantFp8Test, RowCountLeavesTheRowsPastItUntouched) {
  constexpr int64_t kRows = 37, kCols = 5120;
  const std::vector<float> x = Inputs(kRows, kCols, 4711);
  const Quantized want = Cpu(x);
  DeviceBuffer<float> dx(x);
  DeviceBuffer<uint8_t> codes(kRows * kCols), scales(kRows * kCols / 32);
  DeviceBuffer<int64_t> count(1);
  ASSERT_TRUE(dx.ok() && codes.ok() && scales.ok() && count.ok());
  for (const int64_t used : {int64_t{0}, int64_t{1}, int64_t{20}, kRows, kRows + 5, int64_t{-3}}) {
    const int64_t kept = std::clamp<int64_t>(used, 0, kRows);
    cudaMemcpy(count.get(), &used, sizeof(used), cudaMemcpyHostToDevice);
    codes.Poison(0xAB);
    scales.Poison(0xAB);
    ASSERT_TRUE(ActQuantFp8({.x = dx.get(),
                             .codes = codes.get(),
                             .scales = scales.get(),
                             .rows = kRows,
                             .cols = kCols,
                             .row_count = count.get()},
                            nullptr)
                    .ok());
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const std::vector<uint8_t> got_codes = codes.Download(), got_scales = scales.Download();
    int64_t wrong = 0, touched = 0;
    for (int64_t i = 0; i < kRows * kCols; ++i) {
      if (i < kept * kCols) {
        wrong += got_codes[i] != want.codes[i];
      } else {
        touched += got_codes[i] != 0xAB;
      }
    }
    for (int64_t i = 0; i < kRows * kCols / 32; ++i) {
      if (i < kept * kCols / 32) {
        wrong += got_scales[i] != want.scales[i];
      } else {
        touched += got_scales[i] != 0xAB;
      }
    }
    EXPECT_EQ(wrong, 0) << "row_count " << used;
    EXPECT_EQ(touched, 0) << "row_count " << used;
  }
}

// Fp8ActBf16 after ActQuantFp8: every element the bf16 bits of the CPU's
// DequantizeFp8 of cpu::QuantizeFp8's codes and scales (exact, so rounding
// to bf16 changes nothing but the width); a NaN block's elements a bf16 NaN
// (the CPU and the GPU may differ in NaN payload). Groups packed and with
// strides larger than packed; rows x cols / 16 not a multiple of the block.
TEST(ActQuantFp8Test, Fp8ActBf16GivesTheCpusDequantizedValues) {
  struct Case {
    int64_t rows, cols;
    int groups;
    int64_t code_pad, scale_pad;  // bytes past a group's packed codes / scales
  };
  for (const Case& c : {Case{1, 256, 1, 0, 0}, Case{7, 5120, 3, 48, 5}, Case{129, 32 * 9, 2, 0, 0},
                        Case{33, 1024, 4, 16, 1}}) {
    SCOPED_TRACE(::testing::Message() << c.rows << " x " << c.cols << ", " << c.groups
                                      << " groups, pads " << c.code_pad << " / " << c.scale_pad);
    const int64_t size = c.rows * c.cols;
    const int64_t cs = size + c.code_pad, ss = size / 32 + c.scale_pad;
    std::vector<float> x;
    std::vector<uint16_t> want;
    int64_t inexact = 0;
    for (int g = 0; g < c.groups; ++g) {
      const std::vector<float> xg = Inputs(c.rows, c.cols, static_cast<uint32_t>(size + g));
      const Quantized q = Cpu(xg);
      std::vector<float> values(size);
      ASSERT_TRUE(cpu::DequantizeFp8(q.codes, q.scales, 32, values).ok());
      x.insert(x.end(), xg.begin(), xg.end());
      for (const float v : values) {
        want.push_back(FloatToBf16Bits(v));
        inexact += !std::isnan(v) && Bf16BitsToFloat(want.back()) != v;
      }
    }
    EXPECT_EQ(inexact, 0) << "a dequantized value that is not a bf16 value";
    DeviceBuffer<float> dx(x);
    DeviceBuffer<uint8_t> codes(c.groups * cs), scales(c.groups * ss);
    DeviceBuffer<uint16_t> out(c.groups * size);
    ASSERT_TRUE(dx.ok() && codes.ok() && scales.ok() && out.ok());
    codes.Poison(0xAB);
    scales.Poison(0xAB);
    out.Poison(0xAB);
    for (int g = 0; g < c.groups; ++g) {
      ASSERT_TRUE(ActQuantFp8({.x = dx.get() + g * size,
                               .codes = codes.get() + g * cs,
                               .scales = scales.get() + g * ss,
                               .rows = c.rows,
                               .cols = c.cols},
                              nullptr)
                      .ok());
    }
    const absl::Status status = Fp8ActBf16({.codes = codes.get(),
                                            .scales = scales.get(),
                                            .out = out.get(),
                                            .rows = c.rows,
                                            .cols = c.cols,
                                            .groups = c.groups,
                                            .code_group_stride = c.code_pad != 0 ? cs : 0,
                                            .scale_group_stride = c.scale_pad != 0 ? ss : 0},
                                           nullptr);
    ASSERT_TRUE(status.ok()) << status;
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const std::vector<uint16_t> got = out.Download();
    auto is_nan = [](uint16_t bits) { return (bits & 0x7FFFu) > 0x7F80u; };
    int64_t wrong = 0, nans = 0, first = -1;
    for (int64_t i = 0; i < c.groups * size; ++i) {
      const bool same = is_nan(want[i]) ? is_nan(got[i]) : got[i] == want[i];
      nans += is_nan(want[i]);
      if (!same && first < 0) first = i;
      wrong += !same;
    }
    EXPECT_EQ(wrong, 0) << "first at " << first << ": got 0x" << std::hex
                        << (first < 0 ? 0 : got[first]) << " want 0x"
                        << (first < 0 ? 0 : want[first]);
    EXPECT_EQ(nans, 64 * c.groups);  // each group's NaN and -Inf blocks (Inputs' blocks 2, 3)
    // row_count: the rows before it get the same bits in every group, the
    // others stay as they were.
    const int64_t used = c.rows / 2;
    DeviceBuffer<int64_t> count(std::vector<int64_t>{used});
    out.Poison(0xAB);
    ASSERT_TRUE(Fp8ActBf16({.codes = codes.get(),
                            .scales = scales.get(),
                            .out = out.get(),
                            .rows = c.rows,
                            .cols = c.cols,
                            .groups = c.groups,
                            .code_group_stride = c.code_pad != 0 ? cs : 0,
                            .scale_group_stride = c.scale_pad != 0 ? ss : 0,
                            .row_count = count.get()},
                           nullptr)
                    .ok());
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const std::vector<uint16_t> counted = out.Download();
    int64_t off = 0;
    for (int64_t i = 0; i < c.groups * size; ++i) {
      const bool in_use = (i % size) / c.cols < used;
      off += counted[i] != (in_use ? got[i] : uint16_t{0xABAB});
    }
    EXPECT_EQ(off, 0) << "with row_count " << used;
  }
}

TEST(ActQuantFp8Test, RefusesBadArguments) {
  DeviceBuffer<uint8_t> buf(4096);
  ASSERT_TRUE(buf.ok());
  uint8_t* d = buf.get();
  const ActQuantFp8Params good{
      .x = d, .codes = d + 1024, .scales = d + 2048, .rows = 2, .cols = 64};
  EXPECT_TRUE(ActQuantFp8(good, nullptr).ok());
  using P = ActQuantFp8Params;
  EXPECT_TRUE(EachIsInvalidArgument(good, [](const P& p) { return ActQuantFp8(p, nullptr).code(); },
                                    {
                                        [](P& p) { p.x = nullptr; },
                                        [](P& p) { p.cols = 48; },
                                        [](P& p) { p.rows = 0; },
                                        [&](P& p) { p.x = d + 4; },
                                        [&](P& p) { p.codes = d + 1028; },
                                    }));
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

}  // namespace
}  // namespace weir::kernels::cuda::dense
