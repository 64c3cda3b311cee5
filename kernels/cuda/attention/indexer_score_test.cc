#include "kernels/cuda/attention/indexer_score.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/common/numeric_formats.h"
#include "kernels/cpu/indexer_score.h"
#include "kernels/cuda/attention/device_buffer.h"

namespace weir::kernels::cuda {
namespace {

using testing::DeviceBuffer;

struct Shape {
  int64_t queries;
  int heads;
  int dim;
  int64_t keys;
};

// Runs both backends on fresh random inputs and requires bit-identical
// scores: the GPU performs the CPU's operations in the CPU's order with the
// same roundings (the header's contract), in both modes.
void Compare(const Shape& shape, bool round_bf16, uint32_t seed) {
  SCOPED_TRACE(::testing::Message() << "queries " << shape.queries << " heads " << shape.heads
                                    << " dim " << shape.dim << " keys " << shape.keys
                                    << " bf16 " << round_bf16);
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> q(shape.queries * shape.heads * shape.dim), k(shape.keys * shape.dim),
      weights(shape.queries * shape.heads);
  // Inputs as the model feeds them: bf16 values in bf16 mode.
  auto value = [&](float scale) {
    const float v = scale * normal(rng);
    return round_bf16 ? RoundToBf16(v) : v;
  };
  for (float& v : q) v = value(1.0f);
  for (float& v : k) v = value(1.0f);
  for (float& v : weights) v = value(0.02f);
  // Visible lengths: none, all, and everything between.
  std::vector<int64_t> visible(shape.queries);
  std::uniform_int_distribution<int64_t> pick(0, shape.keys);
  for (int64_t s = 0; s < shape.queries; ++s) {
    visible[s] = s == 0 ? shape.keys : s == 1 ? 0 : pick(rng);
  }
  std::vector<float> want(shape.queries * shape.keys);
  ASSERT_TRUE(cpu::IndexerScore({.q = q, .k = k, .weights = weights, .visible_len = visible,
                                 .out = want, .queries = shape.queries, .heads = shape.heads,
                                 .dim = shape.dim, .keys = shape.keys, .round_bf16 = round_bf16})
                  .ok());

  DeviceBuffer<float> dq(q), dk(k), dweights(weights), dout(want.size());
  DeviceBuffer<int64_t> dvisible(visible);
  dout.Poison();
  ASSERT_TRUE(IndexerScore({.q = dq.get(), .k = dk.get(), .weights = dweights.get(),
                            .visible_len = dvisible.get(), .out = dout.get(),
                            .queries = shape.queries, .heads = shape.heads, .dim = shape.dim,
                            .keys = shape.keys, .round_bf16 = round_bf16},
                           nullptr)
                  .ok());
  const std::vector<float> got = dout.Download();
  int64_t mismatches = 0, first = -1, finite = 0;
  double max_abs = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0) {
      if (mismatches++ == 0) first = static_cast<int64_t>(i);
      if (std::isfinite(want[i])) max_abs = std::max(max_abs, std::fabs(double(got[i]) - want[i]));
    }
    finite += std::isfinite(want[i]);
  }
  std::printf("queries %lld heads %d dim %d keys %lld bf16 %d: %lld finite scores, %lld differ "
              "(max abs %.3g)\n",
              static_cast<long long>(shape.queries), shape.heads, shape.dim,
              static_cast<long long>(shape.keys), round_bf16, static_cast<long long>(finite),
              static_cast<long long>(mismatches), max_abs);
  EXPECT_GT(finite, 0);
  EXPECT_EQ(mismatches, 0) << "first at query " << first / shape.keys << " key "
                           << first % shape.keys << ": got " << got[first] << " want "
                           << want[first];
}

TEST(IndexerScoreCudaTest, BitIdenticalToTheCpuReference) {
  const Shape shapes[] = {
      {.queries = 5, .heads = 32, .dim = 128, .keys = 3000},  // V4.1 (index_n_heads 32)
      {.queries = 2, .heads = 64, .dim = 128, .keys = 129},   // 64 heads, a 1-key tail tile
      {.queries = 3, .heads = 1, .dim = 1, .keys = 1},
      {.queries = 9, .heads = 3, .dim = 37, .keys = 300},
      // More queries than one grid column takes (65535): blocks loop over queries.
      {.queries = 70000, .heads = 1, .dim = 4, .keys = 3},
  };
  uint32_t seed = 1;
  for (const Shape& shape : shapes) {
    for (bool round_bf16 : {false, true}) Compare(shape, round_bf16, seed++);
  }
}

TEST(IndexerScoreCudaTest, RefusesWhatItDoesNotSupport) {
  float* f = reinterpret_cast<float*>(16);
  int64_t* v = reinterpret_cast<int64_t*>(16);
  const IndexerScoreParams good{.q = f, .k = f, .weights = f, .visible_len = v, .out = f,
                                .queries = 1, .heads = 32, .dim = 128, .keys = 8};
  EXPECT_TRUE(SupportsIndexerScore(good));
  IndexerScoreParams p = good;
  p.dim = 0;
  EXPECT_EQ(IndexerScore(p, nullptr).code(), absl::StatusCode::kInvalidArgument);
  p = good;
  p.heads = 1024;  // the query's heads no longer fit in shared memory
  EXPECT_EQ(IndexerScore(p, nullptr).code(), absl::StatusCode::kInvalidArgument);
  p = good;
  p.visible_len = nullptr;
  EXPECT_EQ(IndexerScore(p, nullptr).code(), absl::StatusCode::kInvalidArgument);
  p = good;
  p.keys = -1;
  EXPECT_EQ(IndexerScore(p, nullptr).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace weir::kernels::cuda
