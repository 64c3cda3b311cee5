// kernels/cpu/rope_test.cc

#include "kernels/cpu/rope.h"

#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace weir::kernels::cpu {
namespace {

RopeTable Table(const RopeConfig& config) {
  absl::StatusOr<RopeTable> table = RopeTable::Create(config);
  EXPECT_TRUE(table.ok()) << table.status();
  return *std::move(table);
}

TEST(Rope, AdjacentPairsOnTheLastDims) {
  // head_dim 6, rope_dim 4: dims 0-1 untouched, pairs (2,3) and (4,5) rotate.
  RopeTable table = Table({.rope_dim = 4, .theta = 10000.0f});
  ASSERT_EQ(table.freqs().size(), 2u);
  EXPECT_EQ(table.freqs()[0], 1.0f);
  EXPECT_FLOAT_EQ(table.freqs()[1], 0.01f);  // 10000^(-2/4)
  std::vector<float> x = {7.0f, -7.0f, 1.0f, 0.0f, 0.0f, 1.0f};
  std::vector<int64_t> pos = {1};
  ASSERT_TRUE(ApplyRope(table, {.x = x, .positions = pos, .num_tokens = 1, .head_dim = 6}).ok());
  EXPECT_EQ(x[0], 7.0f);
  EXPECT_EQ(x[1], -7.0f);
  EXPECT_FLOAT_EQ(x[2], std::cos(1.0f));   // (1, 0) * e^{i}
  EXPECT_FLOAT_EQ(x[3], std::sin(1.0f));   // adjacent, not x[4] (half-split would differ)
  EXPECT_FLOAT_EQ(x[4], -std::sin(0.01f)); // (0, 1) * e^{0.01 i}
  EXPECT_FLOAT_EQ(x[5], std::cos(0.01f));
}

TEST(Rope, PositionZeroIsIdentityAndInverseUndoes) {
  RopeTable table = Table({.rope_dim = 64, .theta = 10000.0f});
  std::mt19937 rng(2);
  std::normal_distribution<float> normal;
  const int tokens = 3, heads = 2, dim = 128;
  std::vector<float> x(tokens * heads * dim);
  for (float& v : x) v = normal(rng);
  std::vector<float> original = x;
  std::vector<int64_t> pos = {0, 5, 100000};
  RopeArgs args{.x = x, .positions = pos, .num_tokens = tokens, .num_heads = heads, .head_dim = dim};
  ASSERT_TRUE(ApplyRope(table, args).ok());
  for (int i = 0; i < heads * dim; ++i) EXPECT_EQ(x[i], original[i]);  // position 0
  EXPECT_NE(x[heads * dim + dim - 1], original[heads * dim + dim - 1]);
  args.direction = RopeDirection::kInverse;
  ASSERT_TRUE(ApplyRope(table, args).ok());
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(x[i], original[i], 2e-6f) << i;
}

TEST(Rope, ScoresDependOnlyOnRelativePosition) {
  RopeTable table = Table({.rope_dim = 64, .theta = 160000.0f, .original_seq_len = 65536,
                           .factor = 16.0f});
  std::mt19937 rng(4);
  std::normal_distribution<float> normal;
  std::vector<float> q(64), k(64);
  for (float& v : q) v = normal(rng);
  for (float& v : k) v = normal(rng);
  auto score = [&](int64_t pq, int64_t pk) {
    std::vector<float> a = q, b = k;
    std::vector<int64_t> p1 = {pq}, p2 = {pk};
    EXPECT_TRUE(ApplyRope(table, {.x = a, .positions = p1, .num_tokens = 1, .head_dim = 64}).ok());
    EXPECT_TRUE(ApplyRope(table, {.x = b, .positions = p2, .num_tokens = 1, .head_dim = 64}).ok());
    double dot = 0;
    for (int i = 0; i < 64; ++i) dot += double(a[i]) * b[i];
    return dot;
  };
  EXPECT_NEAR(score(10, 3), score(107, 100), 1e-4);
  EXPECT_GT(std::fabs(score(10, 3) - score(10, 9)), 1e-3);
}

TEST(Rope, YarnRampForV41CompressedLayers) {
  // theta 160000, orig 65536, factor 16, beta 32/1, d 64:
  // corr(32) = 15.45 -> low 15; corr(1) = 24.71 -> high 25.
  RopeTable plain = Table({.rope_dim = 64, .theta = 160000.0f});
  RopeConfig config = LayerRopeConfig(2, 64, 10000.0f, 160000.0f, 65536, 16.0f, 32.0f, 1.0f);
  EXPECT_EQ(config.theta, 160000.0f);
  RopeTable yarn = Table(config);
  for (int i = 0; i <= 15; ++i) EXPECT_EQ(yarn.freqs()[i], plain.freqs()[i]) << i;
  for (int i = 25; i < 32; ++i) EXPECT_FLOAT_EQ(yarn.freqs()[i], plain.freqs()[i] / 16) << i;
  // i = 20: ramp 0.5 -> f * (0.5 / 16 + 0.5).
  EXPECT_FLOAT_EQ(yarn.freqs()[20], plain.freqs()[20] * 0.53125f);
  // Ratio-0 layers: theta 10000, no YaRN.
  RopeConfig swa = LayerRopeConfig(0, 64, 10000.0f, 160000.0f, 65536, 16.0f, 32.0f, 1.0f);
  EXPECT_EQ(swa.theta, 10000.0f);
  EXPECT_EQ(swa.original_seq_len, 0);
}

TEST(Rope, RejectsBadArgs) {
  EXPECT_FALSE(RopeTable::Create({.rope_dim = 63}).ok());
  EXPECT_FALSE(RopeTable::Create({.rope_dim = 64, .theta = 1.0f}).ok());
  RopeTable table = Table({.rope_dim = 4});
  std::vector<float> x(8);
  std::vector<int64_t> pos = {1, 2};
  EXPECT_EQ(ApplyRope(table, {.x = x, .positions = pos, .num_tokens = 2, .head_dim = 2}).code(),
            absl::StatusCode::kInvalidArgument);  // head_dim < rope_dim
  EXPECT_EQ(ApplyRope(table, {.x = x, .positions = pos, .num_tokens = 1, .head_dim = 4}).code(),
            absl::StatusCode::kInvalidArgument);  // positions size
  std::vector<int64_t> neg = {1, -1};
  EXPECT_EQ(ApplyRope(table, {.x = x, .positions = neg, .num_tokens = 2, .head_dim = 4}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(ApplyRope(table, {.x = x, .positions = pos, .num_tokens = 2, .head_dim = 4}).ok());
}

TEST(Rope, CosSinAreTheValuesApplyRopeRotatesBy) {
  RopeTable table = Table({.rope_dim = 8, .theta = 10000.0f});
  std::vector<int64_t> pos = {0, 3, 70001};
  std::vector<float> cs(pos.size() * 8);
  ASSERT_TRUE(RopeCosSin(table, pos, cs).ok());
  for (size_t t = 0; t < pos.size(); ++t) {
    for (int i = 0; i < 4; ++i) {
      const float angle = static_cast<float>(pos[t]) * table.freqs()[i];
      EXPECT_EQ(cs[t * 8 + 2 * i], std::cos(angle));
      EXPECT_EQ(cs[t * 8 + 2 * i + 1], std::sin(angle));
      // Rotating (1, 0) yields (cos, sin) exactly.
      std::vector<float> x(8, 0.0f);
      x[2 * i] = 1.0f;
      std::vector<int64_t> one = {pos[t]};
      ASSERT_TRUE(ApplyRope(table, {.x = x, .positions = one, .num_tokens = 1, .head_dim = 8}).ok());
      EXPECT_EQ(x[2 * i], cs[t * 8 + 2 * i]);
      EXPECT_EQ(x[2 * i + 1], cs[t * 8 + 2 * i + 1]);
    }
  }
  std::vector<float> short_out(8);
  EXPECT_EQ(RopeCosSin(table, pos, short_out).code(), absl::StatusCode::kInvalidArgument);
  std::vector<int64_t> neg = {-1};
  EXPECT_EQ(RopeCosSin(table, neg, short_out).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace weir::kernels::cpu
