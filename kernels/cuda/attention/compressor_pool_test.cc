#include "kernels/cuda/attention/compressor_pool.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/compressor.h"
#include "kernels/cuda/device_buffer.h"

namespace weir::kernels::cuda {
namespace {

using testing::DeviceBuffer;

bool BitEqual(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Feeds one random sequence through both backends in chunks of the given
// lengths starting at `start_pos`, each backend carrying its own state, and
// compares every chunk's latents and the state after it. Tolerance: none; the
// GPU runs the CPU's loops with the same roundings and the same exp
// (fmath::ExpF), so latents and states must be bit-identical.
void RunSequence(int64_t start_pos, const std::vector<int64_t>& chunks, int64_t dim, int ratio,
                 uint32_t seed) {
  SCOPED_TRACE(::testing::Message() << "start_pos " << start_pos << " dim " << dim << " ratio "
                                    << ratio);
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  // Initial state as the model builds it: empty slots are kv 0, score -inf;
  // the slots of the incomplete group before start_pos hold earlier tokens.
  std::vector<float> kv_state(ratio * dim, 0.0f);
  std::vector<float> score_state(ratio * dim, -std::numeric_limits<float>::infinity());
  for (int64_t pos = start_pos - start_pos % ratio; pos < start_pos; ++pos) {
    for (int64_t c = 0; c < dim; ++c) {
      kv_state[(pos % ratio) * dim + c] = normal(rng);
      score_state[(pos % ratio) * dim + c] = 2.0f * normal(rng);
    }
  }
  DeviceBuffer<float> dkv_state(kv_state), dscore_state(score_state);
  int64_t pos = start_pos;
  double max_abs = 0, num = 0, den = 0;
  for (int64_t tokens : chunks) {
    std::vector<float> kv(tokens * dim), score(tokens * dim);
    for (float& v : kv) v = normal(rng);
    for (float& v : score) v = 2.0f * normal(rng);
    const int64_t count = CompressedPoolCount(pos, tokens, ratio);
    ASSERT_EQ(count, cpu::CompressedCount(pos, tokens, ratio));
    std::vector<float> want(count * dim);
    ASSERT_TRUE(cpu::CompressorPool({.kv = kv, .score = score, .kv_state = kv_state,
                                     .score_state = score_state, .out = want, .start_pos = pos,
                                     .tokens = tokens, .dim = dim, .ratio = ratio})
                    .ok());
    DeviceBuffer<float> dkv(kv), dscore(score), dout(count * dim);
    dout.Poison();
    ASSERT_TRUE(CompressorPool({.kv = dkv.get(), .score = dscore.get(),
                                .kv_state = dkv_state.get(), .score_state = dscore_state.get(),
                                .out = dout.get(), .start_pos = pos, .tokens = tokens,
                                .dim = dim, .ratio = ratio},
                               nullptr)
                    .ok());
    const std::vector<float> got = dout.Download();
    for (int64_t i = 0; i < count * dim; ++i) {
      const double diff = std::fabs(double(got[i]) - want[i]);
      ASSERT_EQ(std::memcmp(&got[i], &want[i], sizeof(float)), 0) << "pos " << pos << " tokens " << tokens << " group " << i / dim
                            << " channel " << i % dim << ": got " << got[i] << " want "
                            << want[i];
      max_abs = std::max(max_abs, diff);
      num += diff * diff;
      den += double(want[i]) * want[i];
    }
    if (ratio == 1) {
      EXPECT_TRUE(BitEqual(got, want)) << "ratio 1 must copy kv";
    }
    EXPECT_TRUE(BitEqual(dkv_state.Download(), kv_state)) << "kv_state after pos " << pos;
    EXPECT_TRUE(BitEqual(dscore_state.Download(), score_state)) << "score_state after pos " << pos;
    pos += tokens;
  }
  const double rel = den > 0 ? std::sqrt(num / den) : 0.0;
  std::printf("start_pos %lld dim %lld ratio %d: %lld tokens, rel %.3g max_abs %.3g\n",
              static_cast<long long>(start_pos), static_cast<long long>(dim), ratio,
              static_cast<long long>(pos - start_pos), rel, max_abs);
  EXPECT_EQ(max_abs, 0.0);
}

TEST(CompressorPoolCudaTest, MatchesTheCpuReferenceAcrossChunks) {
  // V4.1: head_dim 512 at ratios 4 (csa) and 128 (hca); chunks that start and
  // end inside groups, single decode tokens, and an empty call.
  RunSequence(0, {37, 1, 1, 2, 0, 300, 5}, 512, 4, 1);
  RunSequence(6, {1, 1, 1, 1, 1, 1}, 512, 4, 2);
  RunSequence(130, {200, 1, 126, 1, 300}, 512, 128, 3);
  RunSequence(0, {9, 4, 1}, 512, 1, 4);
  // Odd sizes: one channel, a ratio that divides nothing.
  RunSequence(5, {3, 11, 1, 40}, 1, 7, 5);
  RunSequence(3, {64, 2}, 33, 3, 6);
}

TEST(CompressorPoolCudaTest, RefusesWhatItDoesNotSupport) {
  float* f = reinterpret_cast<float*>(16);
  const CompressorPoolParams good{.kv = f, .score = f, .kv_state = f, .score_state = f,
                                  .out = f, .start_pos = 0, .tokens = 4, .dim = 8, .ratio = 4};
  EXPECT_TRUE(SupportsCompressorPool(good));
  CompressorPoolParams p = good;
  p.ratio = 0;
  EXPECT_EQ(CompressorPool(p, nullptr).code(), absl::StatusCode::kInvalidArgument);
  p = good;
  p.start_pos = -1;
  EXPECT_EQ(CompressorPool(p, nullptr).code(), absl::StatusCode::kInvalidArgument);
  p = good;
  p.out = nullptr;  // a group completes
  EXPECT_EQ(CompressorPool(p, nullptr).code(), absl::StatusCode::kInvalidArgument);
  p.tokens = 3;     // none completes: out is not needed
  EXPECT_TRUE(SupportsCompressorPool(p));
  p = good;
  p.kv_state = nullptr;
  EXPECT_EQ(CompressorPool(p, nullptr).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace weir::kernels::cuda
