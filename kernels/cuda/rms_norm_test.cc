#include "kernels/cuda/rms_norm.h"

#include <cuda_runtime.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/common/numeric_formats.h"
#include "kernels/cpu/rms_norm.h"
#include "kernels/cuda/dense/act_quant_fp8.h"
#include "kernels/cuda/device_buffer.h"

namespace weir::kernels::cuda {
namespace {

using testing::DeviceBuffer;

// Relative error ||a - b|| / ||b||.
double RelativeError(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / den);
}

// Elements whose bits differ.
int64_t Mismatches(const std::vector<float>& a, const std::vector<float>& b) {
  int64_t n = 0;
  for (size_t i = 0; i < a.size(); ++i) n += std::memcmp(&a[i], &b[i], sizeof(float)) != 0;
  return n;
}

TEST(RmsNormCudaTest, MatchesTheCpuReference) {
  // V4.1 shapes: hidden 5120 (and hc_mult x hidden 20480), small and large rows.
  // 12288 and 12256: a row of exactly 48 KiB (not staged: the static shared
  // memory beside it would not fit) and the longest staged one.
  for (auto [rows, dim] : {std::pair<int64_t, int64_t>{1, 5120},
                           {7, 512},
                           {64, 20480},
                           {333, 256},
                           {2, 12288},
                           {2, 12256}}) {
    std::mt19937 rng(rows * 31 + dim);
    std::normal_distribution<float> normal(0.0f, 3.0f);
    std::vector<float> x(rows * dim), w(dim), expect(rows * dim), got(rows * dim);
    for (float& v : x) v = normal(rng);
    for (float& v : w) v = 1.0f + 0.1f * normal(rng);
    ASSERT_TRUE(cpu::RmsNorm({.x = x, .weight = w, .out = expect, .rows = rows, .dim = dim}).ok());

    float *dx, *dw, *dout;
    ASSERT_EQ(cudaMalloc(&dx, x.size() * 4), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&dw, w.size() * 4), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&dout, x.size() * 4), cudaSuccess);
    cudaMemcpy(dx, x.data(), x.size() * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(dw, w.data(), w.size() * 4, cudaMemcpyHostToDevice);
    cudaMemset(dout, 0xFF, x.size() * 4);  // Poison (NaN).
    ASSERT_TRUE(RmsNorm({.x = dx, .weight = dw, .out = dout, .rows = rows, .dim = dim},
                        nullptr).ok());
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    cudaMemcpy(got.data(), dout, got.size() * 4, cudaMemcpyDeviceToHost);
    // Same double sum order (fmath::LaneSum) and the same IEEE operations as
    // the CPU: bit-identical.
    EXPECT_EQ(Mismatches(got, expect), 0) << rows << "x" << dim << ", relative error "
                                          << RelativeError(got, expect);
    // In place, no weight.
    ASSERT_TRUE(cpu::RmsNorm({.x = x, .out = expect, .rows = rows, .dim = dim}).ok());
    ASSERT_TRUE(RmsNorm({.x = dx, .out = dx, .rows = rows, .dim = dim}, nullptr).ok());
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    cudaMemcpy(got.data(), dx, got.size() * 4, cudaMemcpyDeviceToHost);
    EXPECT_EQ(Mismatches(got, expect), 0) << rows << "x" << dim << " in place, relative error "
                                          << RelativeError(got, expect);
    // round_bf16: the bits of a bf16 rounding pass after the norm.
    cudaMemcpy(dx, x.data(), x.size() * 4, cudaMemcpyHostToDevice);
    ASSERT_TRUE(cpu::RmsNorm({.x = x, .weight = w, .out = expect, .rows = rows, .dim = dim}).ok());
    for (float& v : expect) v = kernels::RoundToBf16(v);
    ASSERT_TRUE(
        RmsNorm({.x = dx, .weight = dw, .out = dout, .rows = rows, .dim = dim, .round_bf16 = true},
                nullptr)
            .ok());
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    cudaMemcpy(got.data(), dout, got.size() * 4, cudaMemcpyDeviceToHost);
    EXPECT_EQ(Mismatches(got, expect), 0) << rows << "x" << dim << " rounded to bf16";
    cudaFree(dx);
    cudaFree(dw);
    cudaFree(dout);
  }
}

// With codes: the output's FP8 form in the same launch, byte for byte what
// ActQuantFp8 makes of the output (rows with huge, tiny and NaN values
// included), and the output itself unchanged; staged and unstaged rows, in
// place and not, bf16-rounded and not.
TEST(RmsNormCudaTest, FusedFp8FormIsActQuantOfTheOutput) {
  for (auto [rows, dim] : {std::pair<int64_t, int64_t>{1, 32},
                           {3, 5120},
                           {5, 64},
                           {2, 12288},
                           {4, 12256 - 12256 % 32},
                           {65, 1536}}) {
    for (bool round : {false, true}) {
      std::mt19937 rng(rows * 7 + dim + round);
      std::normal_distribution<float> normal(0.0f, 3.0f);
      std::vector<float> x(rows * dim), w(dim);
      for (float& v : x) v = normal(rng);
      for (float& v : w) v = 1.0f + 0.1f * normal(rng);
      if (rows > 2) {
        x[dim + 5] = 1e30f;    // row 1: one block dominated by a huge value
        x[2 * dim + 3] = NAN;  // row 2: NaN everywhere after the norm
      }
      DeviceBuffer<float> dx(x), dw(w), plain(x.size()), fused(x.size());
      DeviceBuffer<uint8_t> want_codes(x.size()), want_scales(x.size() / 32), codes(x.size()),
          scales(x.size() / 32);
      plain.Poison();
      fused.Poison();
      codes.Poison();
      scales.Poison();
      ASSERT_TRUE(RmsNorm({.x = dx.get(),
                           .weight = dw.get(),
                           .out = plain.get(),
                           .rows = rows,
                           .dim = dim,
                           .round_bf16 = round},
                          nullptr)
                      .ok());
      ASSERT_TRUE(dense::ActQuantFp8({.x = plain.get(),
                                      .codes = want_codes.get(),
                                      .scales = want_scales.get(),
                                      .rows = rows,
                                      .cols = dim},
                                     nullptr)
                      .ok());
      // In place on a copy of x, as the decoder runs it.
      fused.Upload(x);
      ASSERT_TRUE(RmsNorm({.x = fused.get(),
                           .weight = dw.get(),
                           .out = fused.get(),
                           .rows = rows,
                           .dim = dim,
                           .round_bf16 = round,
                           .codes = codes.get(),
                           .scales = scales.get()},
                          nullptr)
                      .ok());
      const std::vector<float> a = plain.Download(), b = fused.Download();
      EXPECT_EQ(Mismatches(b, a), 0) << rows << "x" << dim << " round " << round;
      EXPECT_TRUE(codes.Download() == want_codes.Download())
          << rows << "x" << dim << " round " << round;
      EXPECT_TRUE(scales.Download() == want_scales.Download())
          << rows << "x" << dim << " round " << round;
    }
  }
  float* p = reinterpret_cast<float*>(256);
  uint8_t* q = reinterpret_cast<uint8_t*>(256);
  EXPECT_FALSE(SupportsRmsNorm({.x = p, .out = p, .rows = 1, .dim = 48, .codes = q, .scales = q}));
  EXPECT_FALSE(SupportsRmsNorm({.x = p, .out = p, .rows = 1, .dim = 64, .codes = q}));
  EXPECT_FALSE(
      SupportsRmsNorm({.x = p, .out = p, .rows = 1, .dim = 64, .codes = q + 4, .scales = q}));
  EXPECT_TRUE(SupportsRmsNorm({.x = p, .out = p, .rows = 1, .dim = 64, .codes = q, .scales = q}));
}

TEST(RmsNormCudaTest, RefusesWhatItDoesNotSupport) {
  float* p = reinterpret_cast<float*>(16);
  EXPECT_FALSE(SupportsRmsNorm({.x = p, .out = p, .rows = 1, .dim = 6}));
  EXPECT_EQ(RmsNorm({.x = p, .out = p, .rows = 0, .dim = 8}, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RmsNorm({.x = nullptr, .out = p, .rows = 1, .dim = 8}, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace weir::kernels::cuda
