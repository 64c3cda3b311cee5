#include "worker/model/row_gemm.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
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

// Every element is the row-stable order's, bit for bit, on both paths: the
// 4-row AVX2 tiles and their 1 - 3 row remainders, the 2 x 4 and 1 x 4
// tiles, the odd last row, the columns past a multiple of 4 and the k tail;
// values spread over many binades, with zeros, subnormal products, Inf and
// NaN among them.
TEST(RowStableGemmTest, BitIdenticalToTheRowStableOrder) {
  std::printf("RowStableGemm takes the %s path here\n",
              RowStableGemmUsesAvx2() ? "AVX2" : "128-bit");
  std::mt19937 gen(9);
  std::uniform_real_distribution<float> exponent(-60.0f, 40.0f);
  for (int64_t k : {1, 3, 4, 5, 37, 256}) {
    for (int64_t m : {1, 2, 3, 4, 5, 7, 9}) {
      const int64_t n = 11;
      std::vector<float> x = Random(m * k, 5 + static_cast<uint32_t>(m)), w = Random(n * k, 6);
      for (size_t i = 0; i < x.size(); i += 3) x[i] *= std::exp2(exponent(gen));
      for (size_t i = 0; i < w.size(); i += 5) w[i] *= std::exp2(exponent(gen));
      if (m >= 3 && k >= 4) {
        x[k + 1] = 0.0f;
        x[2 * k] = std::numeric_limits<float>::infinity();
        w[3 * k + 2] = std::numeric_limits<float>::quiet_NaN();
        x[1] = 1e-30f;
        w[1] = 1e-20f;  // a product below the normal range
      }
      std::vector<float> fast(m * n), narrow(m * n);
      RowStableGemm(x.data(), w.data(), fast.data(), m, n, k);
      RowStableGemmSse(x.data(), w.data(), narrow.data(), m, n, k);
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
          const float want = kernels::RowStableDotReference(x.data() + i * k, w.data() + j * k, k);
          ASSERT_EQ(0, std::memcmp(&fast[i * n + j], &want, sizeof(float)))
              << "k " << k << " rows " << m << " (" << i << ", " << j << "): " << fast[i * n + j]
              << " vs " << want;
          ASSERT_EQ(0, std::memcmp(&narrow[i * n + j], &want, sizeof(float)))
              << "128-bit path, k " << k << " rows " << m << " (" << i << ", " << j
              << "): " << narrow[i * n + j] << " vs " << want;
        }
      }
    }
  }
}

// Weights held as bf16 bit patterns give the product of the widened weights
// bit for bit, on both paths, for every tile shape and tail.
TEST(RowStableGemmTest, Bf16WeightsEqualTheirWidenedProduct) {
  std::mt19937 gen(13);
  std::uniform_real_distribution<float> exponent(-30.0f, 20.0f);
  for (int64_t k : {1, 3, 4, 7, 36, 257}) {
    for (int64_t m : {1, 2, 3, 4, 5, 6, 9}) {
      for (int64_t n : {1, 4, 7, 12}) {
        std::vector<float> x = Random(m * k, 21 + static_cast<uint32_t>(m));
        const std::vector<float> r = Random(n * k, 22 + static_cast<uint32_t>(k));
        std::vector<uint16_t> w16(n * k);
        std::vector<float> wide(n * k);
        for (size_t i = 0; i < w16.size(); ++i) {
          const float v = r[i] * std::exp2(exponent(gen));
          uint32_t bits;
          std::memcpy(&bits, &v, 4);
          w16[i] = static_cast<uint16_t>(bits >> 16);  // truncated: any bf16 pattern
          bits = static_cast<uint32_t>(w16[i]) << 16;
          std::memcpy(&wide[i], &bits, 4);
        }
        std::vector<float> want(m * n), got(m * n), narrow(m * n);
        RowStableGemm(x.data(), wide.data(), want.data(), m, n, k);
        RowStableGemmBf16W(x.data(), w16.data(), got.data(), m, n, k);
        RowStableGemmBf16WSse(x.data(), w16.data(), narrow.data(), m, n, k);
        ASSERT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * 4))
            << "k " << k << " rows " << m << " out " << n;
        ASSERT_EQ(0, std::memcmp(narrow.data(), want.data(), narrow.size() * 4))
            << "128-bit path, k " << k << " rows " << m << " out " << n;
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
