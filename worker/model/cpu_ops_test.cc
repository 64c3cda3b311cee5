// CpuOps::Logits under both settings of CpuOpsOptions::row_stable_logits;
// Matmul on a weight's bf16 form (DenseWeight::w_bf16).
#include "worker/model/cpu_ops.h"

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/common/numeric_formats.h"

namespace weir::model {
namespace {

std::vector<float> Normal(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(gen);
  return v;
}

bool BitEqual(const float* a, const float* b, size_t n) {
  return std::memcmp(a, b, n * sizeof(float)) == 0;
}

TEST(CpuOpsTest, RowStableLogitsAreBatchInvariantAndEqualMatmul) {
  const int64_t rows = 7, out = 300, in = 257;
  const DenseWeight head{.out = out, .in = in, .w = Normal(out * in, 1, 0.05f)};
  const std::vector<float> x = Normal(rows * in, 2);
  CpuOps ops(ActivationPrecision::kFp32, {.row_stable_logits = true});
  std::vector<float> all(rows * out), one(out), mm(rows * out);
  ASSERT_TRUE(ops.Logits(head, x, rows, all).ok());
  ASSERT_TRUE(ops.Matmul(head, x, rows, mm).ok());  // RowStableGemm, no FP8 activation
  EXPECT_TRUE(BitEqual(all.data(), mm.data(), all.size()));
  for (int64_t r : {0, 3, 6}) {
    ASSERT_TRUE(ops.Logits(head, std::span(x).subspan(r * in, in), 1, one).ok());
    EXPECT_TRUE(BitEqual(one.data(), all.data() + r * out, out)) << "row " << r;
  }
  // The default (OpenBLAS) agrees to fp32 reduction-order error.
  CpuOps blas(ActivationPrecision::kFp32);
  std::vector<float> y(rows * out);
  ASSERT_TRUE(blas.Logits(head, x, rows, y).ok());
  double diff = 0, scale = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    diff = std::max(diff, double{std::fabs(y[i] - all[i])});
    scale = std::max(scale, double{std::fabs(all[i])});
  }
  EXPECT_LT(diff / scale, 1e-5);
  EXPECT_GT(scale, 0.1);
  std::vector<float> bad(3);
  EXPECT_EQ(ops.Logits(head, x, rows, bad).code(), absl::StatusCode::kInvalidArgument);
}

// A weight whose values are all bf16 ones keeps a bf16 form, which Matmul
// reads with the same result bit for bit (FP8 activation on and off); one
// value off the bf16 grid leaves no form.
TEST(CpuOpsTest, Bf16FormGivesTheSameProduct) {
  const int64_t rows = 5, out = 11, in = 96;  // FP8 activations: blocks of 32
  DenseWeight w{.out = out, .in = in, .w = Normal(out * in, 3, 0.1f)};
  for (float& v : w.w) v = kernels::RoundToBf16(v);
  const std::vector<float> x = Normal(rows * in, 4);
  CpuOps ops(ActivationPrecision::kFp32);
  for (bool fp8 : {false, true}) {
    w.fp8_activation = fp8;
    w.w_bf16.clear();
    std::vector<float> wide(rows * out), narrow(rows * out);
    ASSERT_TRUE(ops.Matmul(w, x, rows, wide).ok());
    ASSERT_TRUE(KeepBf16Form(w));
    ASSERT_EQ(w.w_bf16.size(), w.w.size());
    ASSERT_TRUE(ops.Matmul(w, x, rows, narrow).ok());
    EXPECT_TRUE(BitEqual(wide.data(), narrow.data(), wide.size())) << "fp8 " << fp8;
  }
  w.w[17] = std::nextafter(w.w[17], 1.0f);
  EXPECT_FALSE(KeepBf16Form(w));
  EXPECT_TRUE(w.w_bf16.empty());
}

}  // namespace
}  // namespace weir::model
