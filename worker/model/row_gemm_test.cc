#include "worker/model/row_gemm.h"

#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/common/row_stable.h"

namespace weir::model {
namespace {

std::vector<float> Random(int64_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = u(gen);
  return v;
}

TEST(RowStableGemmTest, MatchesDoubleReference) {
  const int64_t m = 5, n = 7, k = 37;  // odd sizes: every tail path
  const std::vector<float> x = Random(m * k, 1), w = Random(n * k, 2);
  std::vector<float> y(m * n);
  RowStableGemm(x.data(), w.data(), y.data(), m, n, k);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double ref = 0;
      for (int64_t c = 0; c < k; ++c) ref += double{x[i * k + c]} * w[j * k + c];
      EXPECT_NEAR(y[i * n + j], ref, 1e-5) << i << "," << j;
    }
  }
}

// Every element is the row-stable order's, bit for bit: the 2 x 4 and 1 x 4
// tiles, the odd last row, the columns past a multiple of 4 and the k tail.
TEST(RowStableGemmTest, BitIdenticalToTheRowStableOrder) {
  for (int64_t k : {1, 3, 4, 37, 256}) {
    const int64_t m = 5, n = 11;
    const std::vector<float> x = Random(m * k, 5), w = Random(n * k, 6);
    std::vector<float> y(m * n);
    RowStableGemm(x.data(), w.data(), y.data(), m, n, k);
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        const float want = kernels::RowStableDotReference(x.data() + i * k, w.data() + j * k, k);
        ASSERT_EQ(0, std::memcmp(&y[i * n + j], &want, sizeof(float)))
            << "k " << k << " (" << i << ", " << j << "): " << y[i * n + j] << " vs " << want;
      }
    }
  }
}

// A row's result is bit-identical whatever the number of rows in the call.
TEST(RowStableGemmTest, RowsDoNotDependOnBatch) {
  for (int64_t k : {4, 64, 130, 1024}) {
    const int64_t rows = 9, n = 13;
    const std::vector<float> x = Random(rows * k, 3), w = Random(n * k, 4);
    std::vector<float> all(rows * n);
    RowStableGemm(x.data(), w.data(), all.data(), rows, n, k);
    for (int64_t first = 0; first < rows; ++first) {
      for (int64_t count = 1; first + count <= rows; ++count) {
        std::vector<float> part(count * n);
        RowStableGemm(x.data() + first * k, w.data(), part.data(), count, n, k);
        ASSERT_EQ(0, std::memcmp(part.data(), all.data() + first * n, part.size() * 4))
            << "k " << k << " rows [" << first << ", " << first + count << ")";
      }
    }
  }
}

}  // namespace
}  // namespace weir::model
