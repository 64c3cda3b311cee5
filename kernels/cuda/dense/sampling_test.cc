#include "kernels/cuda/dense/sampling.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/dense/test_util.h"

namespace weir::kernels::cuda::dense {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// Logits with many exact ties: values on a coarse grid (so equal values at
// several ids, including the maximum), -0 and +0, and some -inf (masked).
std::vector<float> TiedLogits(int64_t rows, int64_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> level(-8, 8);
  std::uniform_int_distribution<int> kind(0, 19);
  std::vector<float> v(rows * vocab);
  for (float& f : v) {
    const int k = kind(rng);
    f = k == 0 ? -kInf : k == 1 ? -0.0f : 0.25f * static_cast<float>(level(rng));
  }
  return v;
}

std::vector<float> NormalLogits(int64_t rows, int64_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 4.0f);
  std::vector<float> v(rows * vocab);
  for (float& f : v) f = normal(rng);
  return v;
}

// The CPU sampler's greedy rule (worker/sampling/sampler.cc).
int32_t CpuArgmax(const float* row, int64_t vocab) {
  for (int64_t i = 0; i < vocab; ++i) {
    if (std::isnan(row[i]) || row[i] == kInf) return kArgmaxNonFinite;
  }
  int32_t best = 0;
  for (int32_t i = 1; i < vocab; ++i) {
    if (row[i] > row[best]) best = i;
  }
  return row[best] == -kInf ? kArgmaxAllMasked : best;
}

// The worker's return_top_k order (worker/step_executor.cc).
std::vector<int32_t> CpuTopK(const float* row, int64_t vocab, int k) {
  std::vector<int32_t> order(vocab);
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + k, order.end(), [row](int32_t a, int32_t b) {
    return row[a] > row[b] || (row[a] == row[b] && a < b);
  });
  order.resize(k);
  return order;
}

TEST(ArgmaxRowsCudaTest, MatchesTheCpuSampler) {
  for (int64_t vocab : {int64_t{1}, int64_t{7}, int64_t{1000}, int64_t{129280}}) {
    for (bool tied : {false, true}) {
      const int64_t rows = 9;
      std::vector<float> x = tied ? TiedLogits(rows, vocab, vocab) : NormalLogits(rows, vocab, 3);
      // Row 1: all masked. Row 2: NaN. Row 3: +Inf. Row 4: the maximum at the
      // last id and again at a lower id. Row 5: only zeros of both signs.
      std::fill(x.begin() + vocab, x.begin() + 2 * vocab, -kInf);
      x[2 * vocab + vocab / 2] = std::numeric_limits<float>::quiet_NaN();
      x[3 * vocab + vocab - 1] = kInf;
      x[4 * vocab + vocab - 1] = 1e30f;
      x[4 * vocab + vocab / 3] = 1e30f;
      for (int64_t i = 0; i < vocab; ++i) x[5 * vocab + i] = (i % 3 == 0) ? -0.0f : 0.0f;
      DeviceBuffer<float> dx(x), dvalues(rows);
      DeviceBuffer<int32_t> dids(rows);
      ASSERT_TRUE(dx.ok() && dvalues.ok() && dids.ok());
      dids.Poison(0x55);
      ASSERT_TRUE(ArgmaxRows({.logits = dx.get(), .rows = rows, .vocab = vocab,
                              .ids = dids.get(), .values = dvalues.get()},
                             nullptr)
                      .ok());
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      const std::vector<int32_t> ids = dids.Download();
      const std::vector<float> values = dvalues.Download();
      for (int64_t r = 0; r < rows; ++r) {
        const int32_t want = CpuArgmax(x.data() + r * vocab, vocab);
        EXPECT_EQ(ids[r], want) << "vocab " << vocab << " tied " << tied << " row " << r;
        if (want >= 0) {
          EXPECT_EQ(values[r], x[r * vocab + want]);
        }
      }
      EXPECT_EQ(ids[1], kArgmaxAllMasked);
      EXPECT_EQ(ids[2], kArgmaxNonFinite);
      EXPECT_EQ(ids[5], 0);
    }
  }
}

TEST(TopKRowsCudaTest, MatchesTheWorkersOrder) {
  for (int64_t vocab : {int64_t{1}, int64_t{5}, int64_t{3000}, int64_t{129280}}) {
    for (int k : {1, 5, 20, 1000, kMaxTopK}) {
      if (k > vocab) continue;
      for (bool tied : {false, true}) {
        const int64_t rows = 3;
        std::vector<float> x =
            tied ? TiedLogits(rows, vocab, vocab + k) : NormalLogits(rows, vocab, vocab * k);
        if (vocab >= 5) std::fill(x.begin(), x.begin() + vocab, 1.5f);  // row 0: all equal
        DeviceBuffer<float> dx(x), dvalues(rows * k);
        DeviceBuffer<int32_t> dids(rows * k);
        ASSERT_TRUE(dx.ok() && dvalues.ok() && dids.ok());
        dids.Poison(0x55);
        ASSERT_TRUE(TopKRows({.logits = dx.get(), .rows = rows, .vocab = vocab, .k = k,
                              .values = dvalues.get(), .ids = dids.get()},
                             nullptr)
                        .ok());
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        const std::vector<int32_t> ids = dids.Download();
        const std::vector<float> values = dvalues.Download();
        int64_t wrong = 0;
        for (int64_t r = 0; r < rows; ++r) {
          const std::vector<int32_t> want = CpuTopK(x.data() + r * vocab, vocab, k);
          for (int i = 0; i < k; ++i) {
            const bool ok = ids[r * k + i] == want[i] &&
                            std::memcmp(&values[r * k + i], &x[r * vocab + want[i]], 4) == 0;
            if (!ok && wrong++ == 0) {
              ADD_FAILURE() << "vocab " << vocab << " k " << k << " tied " << tied << " row "
                            << r << " entry " << i << ": got id " << ids[r * k + i]
                            << " want " << want[i];
            }
          }
        }
        EXPECT_EQ(wrong, 0);
      }
    }
  }
}

TEST(RowLogSumExpCudaTest, GivesTheCpuSamplersLogprobs) {
  const int64_t rows = 4, vocab = 129280;
  std::vector<float> x = NormalLogits(rows, vocab, 99);
  for (int64_t i = 0; i < vocab; i += 7) x[3 * vocab + i] = -kInf;  // masked tokens
  const std::vector<float> temperature = {0.0f, 1.0f, 0.7f, 1.3f};
  DeviceBuffer<float> dx(x), dt(temperature), dmax(rows);
  DeviceBuffer<double> dsum(rows);
  ASSERT_TRUE(dx.ok() && dt.ok() && dmax.ok() && dsum.ok());
  ASSERT_TRUE(RowLogSumExp({.logits = dx.get(), .temperature = dt.get(), .rows = rows,
                            .vocab = vocab, .max = dmax.get(), .sum = dsum.get()},
                           nullptr)
                  .ok());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<float> max = dmax.Download();
  const std::vector<double> sum = dsum.Download();
  double worst = 0;
  for (int64_t r = 0; r < rows; ++r) {
    // worker/sampling/sampler.cc: v /= temperature (greedy: none), max, then
    // LogSoftmaxAt's double sum in id order.
    std::vector<float> v(x.begin() + r * vocab, x.begin() + (r + 1) * vocab);
    if (temperature[r] > 0) {
      for (float& f : v) f /= temperature[r];
    }
    const float m = *std::max_element(v.begin(), v.end());
    double s = 0;
    for (float f : v) s += std::exp(static_cast<double>(f) - m);
    EXPECT_EQ(max[r], m) << "row " << r;
    EXPECT_NEAR(sum[r], s, 1e-12 * s) << "row " << r;
    for (int64_t id : {int64_t{0}, int64_t{1}, vocab / 2, vocab - 1}) {
      const float want = static_cast<float>(static_cast<double>(v[id]) - m - std::log(s));
      const float got = static_cast<float>(static_cast<double>(v[id]) - max[r] - std::log(sum[r]));
      if (std::isinf(want)) {
        EXPECT_EQ(got, want);
        continue;
      }
      // The double sums differ in order only: at most one float ulp apart.
      EXPECT_LE(std::fabs(got - want), std::fabs(want) * 1.2e-7f) << "row " << r << " id " << id;
      worst = std::max(worst, static_cast<double>(std::fabs(got - want)));
    }
  }
  std::printf("logprob max abs difference vs CPU formula: %.3g\n", worst);
}

TEST(SamplingCudaTest, RefusesBadArguments) {
  auto* f = reinterpret_cast<float*>(256);
  auto* i = reinterpret_cast<int32_t*>(256);
  auto* d = reinterpret_cast<double*>(256);
  EXPECT_EQ(ArgmaxRows({.logits = f, .rows = 0, .vocab = 5, .ids = i}, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ArgmaxRows({.logits = f, .rows = 1, .vocab = 5, .ids = nullptr}, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(TopKRows({.logits = f, .rows = 1, .vocab = 5, .k = 6, .values = f, .ids = i},
                     nullptr)
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(TopKRows({.logits = f, .rows = 1, .vocab = 5000, .k = kMaxTopK + 1, .values = f,
                      .ids = i},
                     nullptr)
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(TopKRows({.logits = f, .rows = 1, .vocab = 5, .k = 0, .values = f, .ids = i},
                     nullptr)
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RowLogSumExp({.logits = f, .rows = 1, .vocab = 0, .max = f, .sum = d}, nullptr)
                .code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace weir::kernels::cuda::dense
