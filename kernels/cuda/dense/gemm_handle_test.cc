#include "kernels/cuda/dense/gemm_handle.h"

#include <cuda_runtime.h>

#include <cstdio>
#include <memory>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/linear.h"
#include "kernels/cuda/dense/test_util.h"

namespace weir::kernels::cuda::dense {
namespace {

// fp32 compute in both, different summation orders: ~sqrt(K) * 2^-24 in
// norm. TF32 (10-bit mantissa inputs) would give ~1e-3 and fail this.
constexpr double kTolerance = 1e-5;

TEST(GemmHandleCudaTest, MatchesCpuLinear) {
  absl::StatusOr<std::unique_ptr<GemmHandle>> gemm = GemmHandle::Create();
  ASSERT_TRUE(gemm.ok()) << gemm.status();
  struct Shape {
    int64_t rows, out, in;
  };
  for (const Shape& s : {Shape{1, 1, 1}, Shape{1, 4096, 7168}, Shape{3, 129, 100},
                         Shape{17, 257, 1000}, Shape{128, 1024, 2048}, Shape{333, 100, 64},
                         Shape{7, 129280, 64}}) {
    for (bool fp8 : {false, true}) {
      if (fp8 && s.in % 32 != 0) continue;
      const std::vector<float> x = NormalValues(s.rows * s.in, s.rows + s.in, 1.0f);
      const std::vector<float> w = NormalValues(s.out * s.in, s.out + 3 * s.in, 0.05f);
      std::vector<float> want(s.rows * s.out);
      const cpu::LinearWeight weight{.format = cpu::WeightFormat::kF32, .out_features = s.out,
                                     .in_features = s.in, .f32 = w};
      ASSERT_TRUE(cpu::Linear(weight, {.x = x, .y = want, .rows = s.rows,
                                       .act_quant = fp8 ? cpu::ActQuant::kFp8
                                                        : cpu::ActQuant::kNone})
                      .ok());
      DeviceBuffer<float> dx(x), dw(w), dy(s.rows * s.out), scratch(s.rows * s.in);
      ASSERT_TRUE(dx.ok() && dw.ok() && dy.ok() && scratch.ok());
      dy.Poison(0xFF);
      const absl::Status status =
          (*gemm)->Matmul({.x = dx.get(), .w = dw.get(), .y = dy.get(), .rows = s.rows,
                           .out = s.out, .in = s.in, .fp8_activation = fp8,
                           .act_scratch = scratch.get()},
                          nullptr);
      ASSERT_TRUE(status.ok()) << status;
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      const double rel = RelativeError(dy.Download(), want);
      EXPECT_LT(rel, kTolerance) << s.rows << "x" << s.out << "x" << s.in << " fp8 " << fp8;
      std::printf("rows %-4lld out %-6lld in %-5lld fp8 %d: rel err vs sgemm %.3g\n",
                  static_cast<long long>(s.rows), static_cast<long long>(s.out),
                  static_cast<long long>(s.in), fp8, rel);
    }
  }
}

TEST(GemmHandleCudaTest, HandlesPointersOffByOneFloat) {
  // Views into larger buffers, aligned to 4 bytes only.
  absl::StatusOr<std::unique_ptr<GemmHandle>> gemm = GemmHandle::Create();
  ASSERT_TRUE(gemm.ok()) << gemm.status();
  const int64_t rows = 5, out = 67, in = 33;
  const std::vector<float> x = NormalValues(rows * in + 1, 11, 1.0f);
  const std::vector<float> w = NormalValues(out * in + 1, 12, 0.1f);
  std::vector<float> want(rows * out);
  const std::vector<float> x_view(x.begin() + 1, x.end()), w_view(w.begin() + 1, w.end());
  ASSERT_TRUE(cpu::Linear({.format = cpu::WeightFormat::kF32, .out_features = out,
                           .in_features = in, .f32 = w_view},
                          {.x = x_view, .y = want, .rows = rows,
                           .act_quant = cpu::ActQuant::kNone})
                  .ok());
  DeviceBuffer<float> dx(x), dw(w), dy(rows * out + 1);
  ASSERT_TRUE(dx.ok() && dw.ok() && dy.ok());
  ASSERT_TRUE((*gemm)->Matmul({.x = dx.get() + 1, .w = dw.get() + 1, .y = dy.get() + 1,
                               .rows = rows, .out = out, .in = in},
                              nullptr)
                  .ok());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<float> got = dy.Download();
  got.erase(got.begin());
  EXPECT_LT(RelativeError(got, want), kTolerance);
}

TEST(GemmHandleCudaTest, RefusesBadArguments) {
  absl::StatusOr<std::unique_ptr<GemmHandle>> gemm = GemmHandle::Create();
  ASSERT_TRUE(gemm.ok()) << gemm.status();
  DeviceBuffer<float> a(1024), b(1024), c(1024);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  const MatmulParams good{.x = a.get(), .w = b.get(), .y = c.get(), .rows = 2, .out = 4,
                          .in = 32};
  ASSERT_TRUE((*gemm)->Matmul(good, nullptr).ok());
  MatmulParams p = good;
  p.out = -1;
  EXPECT_EQ((*gemm)->Matmul(p, nullptr).code(), absl::StatusCode::kInvalidArgument);
  p = good;
  p.fp8_activation = true;  // no act_scratch
  EXPECT_EQ((*gemm)->Matmul(p, nullptr).code(), absl::StatusCode::kInvalidArgument);
  p = good;
  p.y = b.get() + 3;  // overlaps w
  EXPECT_EQ((*gemm)->Matmul(p, nullptr).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

}  // namespace
}  // namespace weir::kernels::cuda::dense
