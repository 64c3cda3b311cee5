#include "kernels/cuda/dense/row_stable_matmul.h"

#include <cuda_runtime.h>

#include <cstdio>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/common/row_stable.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/quant.h"
#include "kernels/cuda/dense/test_util.h"

namespace weir::kernels::cuda::dense {
namespace {

struct Shape {
  int64_t rows, out, in;
};

// The order of kernels/common/row_stable.h, one element at a time (the CPU's
// worker/model RowStableGemm computes the same).
std::vector<float> HostRowStable(const std::vector<float>& x, const std::vector<float>& w,
                                 const Shape& s) {
  std::vector<float> y(s.rows * s.out);
  for (int64_t m = 0; m < s.rows; ++m) {
    for (int64_t n = 0; n < s.out; ++n) {
      y[m * s.out + n] = RowStableDotReference(x.data() + m * s.in, w.data() + n * s.in, s.in);
    }
  }
  return y;
}

// kernels/cpu Linear (OpenBLAS sgemm) on the fp32 weight.
std::vector<float> CpuLinear(const std::vector<float>& x, const std::vector<float>& w,
                             const Shape& s, bool fp8_activation) {
  std::vector<float> y(s.rows * s.out);
  const cpu::LinearWeight weight{.format = cpu::WeightFormat::kF32, .out_features = s.out,
                                 .in_features = s.in, .f32 = w};
  const absl::Status status = cpu::Linear(
      weight, {.x = x, .y = y, .rows = s.rows,
               .act_quant = fp8_activation ? cpu::ActQuant::kFp8 : cpu::ActQuant::kNone});
  EXPECT_TRUE(status.ok()) << status;
  return y;
}

// Runs RowStableMatmul on host data; returns y (empty on failure).
std::vector<float> RunGpu(const std::vector<float>& x, const std::vector<float>& w,
                          const Shape& s, bool fp8_activation) {
  DeviceBuffer<float> dx(x), dw(w), dy(s.rows * s.out), scratch(s.rows * s.in);
  if (!dx.ok() || !dw.ok() || !dy.ok() || !scratch.ok()) return {};
  dy.Poison(0xFF);  // NaN
  const absl::Status status =
      RowStableMatmul({.x = dx.get(), .w = dw.get(), .y = dy.get(), .rows = s.rows,
                       .out = s.out, .in = s.in, .fp8_activation = fp8_activation,
                       .act_scratch = scratch.get()},
                      nullptr);
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  return dy.Download();
}

// Relative error allowed against OpenBLAS: both sum K fp32 products, in
// different orders; each order's error grows like sqrt(K) * 2^-24 in norm
// (K <= 7168: ~5e-6 at worst per element, far less in norm).
constexpr double kSgemmTolerance = 1e-5;

const Shape kShapes[] = {
    {1, 1, 1},        {1, 4096, 7168},  // decode-sized (attention output, V4.1 hidden)
    {2, 33, 7},       {3, 129, 100},    // non-multiples of every tile edge
    {4, 64, 4096},    {5, 65, 96},      // row boundaries of the four kernel choices
    {16, 70, 256},    {17, 70, 256},    {128, 70, 256}, {129, 70, 256},
    {9, 50, 13},      {40, 70, 37},     {150, 70, 37},  // K tails (in % 4 != 0)
    {17, 257, 1000},  {64, 512, 1024},  // prefill-sized
    {333, 100, 64},
};

TEST(RowStableMatmulCudaTest, MatchesTheDocumentedOrderBitForBitAndCpuLinear) {
  for (const Shape& s : kShapes) {
    for (bool fp8 : {false, true}) {
      if (fp8 && s.in % 32 != 0) continue;
      const std::vector<float> x = NormalValues(s.rows * s.in, s.rows * 7 + s.in, 1.0f);
      const std::vector<float> w = NormalValues(s.out * s.in, s.out * 13 + s.in, 0.05f);
      std::vector<float> act = x;
      if (fp8) {
        ASSERT_TRUE(cpu::FakeQuantFp8(act, cpu::kFp8Block).ok());
      }
      const std::vector<float> got = RunGpu(x, w, s, fp8);
      ASSERT_EQ(got.size(), static_cast<size_t>(s.rows * s.out));
      int64_t first = -1;
      const int64_t mismatches = BitMismatches(got, HostRowStable(act, w, s), &first);
      EXPECT_EQ(mismatches, 0) << s.rows << "x" << s.out << "x" << s.in << " fp8 " << fp8
                               << " first mismatch at " << first;
      const double rel = RelativeError(got, CpuLinear(x, w, s, fp8));
      EXPECT_LT(rel, kSgemmTolerance) << s.rows << "x" << s.out << "x" << s.in << " fp8 " << fp8;
      std::printf("rows %-4lld out %-5lld in %-5lld fp8 %d: order mismatches %lld, rel err vs "
                  "sgemm %.3g\n",
                  static_cast<long long>(s.rows), static_cast<long long>(s.out),
                  static_cast<long long>(s.in), fp8, static_cast<long long>(mismatches), rel);
    }
  }
}

TEST(RowStableMatmulCudaTest, ARowsResultDoesNotDependOnTheOtherRows) {
  const Shape all{150, 300, 512};
  const std::vector<float> x = NormalValues(all.rows * all.in, 1, 1.0f);
  const std::vector<float> w = NormalValues(all.out * all.in, 2, 0.05f);
  for (bool fp8 : {false, true}) {
    const std::vector<float> batch = RunGpu(x, w, all, fp8);
    ASSERT_EQ(batch.size(), static_cast<size_t>(all.rows * all.out));
    // Every kernel choice: the batch of 150 runs the register-tile kernel.
    for (auto [first_row, count] : {std::pair<int64_t, int64_t>{0, 1}, {5, 1}, {149, 1},
                                    {8, 3}, {10, 9}, {20, 17}, {100, 40}}) {
      const std::vector<float> part(x.begin() + first_row * all.in,
                                    x.begin() + (first_row + count) * all.in);
      const std::vector<float> got = RunGpu(part, w, {count, all.out, all.in}, fp8);
      const std::vector<float> want(batch.begin() + first_row * all.out,
                                    batch.begin() + (first_row + count) * all.out);
      int64_t first = -1;
      EXPECT_EQ(BitMismatches(got, want, &first), 0)
          << "rows " << first_row << ".." << first_row + count << " fp8 " << fp8
          << " first mismatch at " << first;
    }
  }
}

TEST(RowStableMatmulCudaTest, RefusesBadArguments) {
  DeviceBuffer<float> a(64 * 64), b(64 * 64), c(64 * 64), d(64 * 64);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok() && d.ok());
  const MatmulParams good{.x = a.get(), .w = b.get(), .y = c.get(), .rows = 2, .out = 8,
                          .in = 64, .fp8_activation = true, .act_scratch = d.get()};
  EXPECT_TRUE(SupportsRowStableMatmul(good));
  auto code = [](MatmulParams p) { return RowStableMatmul(p, nullptr).code(); };
  MatmulParams p = good;
  p.rows = 0;
  EXPECT_EQ(code(p), absl::StatusCode::kInvalidArgument);
  p = good;
  p.in = 48;  // FP8 blocks of 32
  EXPECT_EQ(code(p), absl::StatusCode::kInvalidArgument);
  p = good;
  p.act_scratch = nullptr;
  EXPECT_EQ(code(p), absl::StatusCode::kInvalidArgument);
  p = good;
  p.y = a.get() + 10;  // overlaps x
  EXPECT_EQ(code(p), absl::StatusCode::kInvalidArgument);
  p = good;
  p.w = nullptr;
  EXPECT_EQ(code(p), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // nothing was launched
}

}  // namespace
}  // namespace weir::kernels::cuda::dense
