// kernels/cpu/engram_test.cc

#include "kernels/cpu/engram.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/quant.h"

namespace weir::kernels::cpu {
namespace {

TEST(NextUnusedPrimes, DrawsInOrderWithoutReuse) {
  // vocab 10: each n-gram size restarts above 9 but skips primes already used.
  absl::StatusOr<std::vector<int64_t>> primes = NextUnusedPrimes(2, 3, 2, 10);
  ASSERT_TRUE(primes.ok());
  EXPECT_EQ(*primes, (std::vector<int64_t>{11, 13, 17, 19, 23, 29, 31, 37}));
  absl::StatusOr<std::vector<int64_t>> big = NextUnusedPrimes(1, 2, 2, 1000000);
  ASSERT_TRUE(big.ok());
  EXPECT_EQ(*big, (std::vector<int64_t>{1000003, 1000033}));
  EXPECT_FALSE(NextUnusedPrimes(1, 1, 2, 10).ok());
}

struct Hash {
  std::vector<int64_t> rows;
  absl::Status Run(const std::vector<int64_t>& history, int64_t start) {
    static const std::vector<int64_t> kMult = {3, 5, 7};
    static const std::vector<int64_t> kPrimes = {11, 13, 17, 19};  // [1 layer][2 sizes][2 heads]
    rows.assign((history.size() - start) * 4, -9);
    return EngramHash({.history = history, .multipliers = kMult, .primes = kPrimes, .rows = rows,
                       .start_pos = start, .layers = 1, .max_ngram = 3, .heads = 2,
                       .pad_id = 2});
  }
};

TEST(EngramHash, XorOfProductsModPrimesPlusOffsets) {
  // Offsets 0, 11, 24, 41. Position 2 of (4, 6, 8): t = (8, 6, 4) -> 24, 30, 28;
  // 2-gram h = 24 ^ 30 = 6 -> (6 % 11, 6 % 13 + 11); 3-gram 6 ^ 28 = 26 ->
  // (26 % 17 + 24, 26 % 19 + 41).
  Hash h;
  ASSERT_TRUE(h.Run({4, 6, 8}, 2).ok());
  EXPECT_EQ(h.rows, (std::vector<int64_t>{6, 17, 33, 48}));
  // Position 0 looks back past the start: t = (4, pad, pad) -> 12 ^ 10 = 6, 6 ^ 14 = 8.
  ASSERT_TRUE(h.Run({4, 6, 8}, 0).ok());
  EXPECT_EQ(std::vector<int64_t>(h.rows.begin(), h.rows.begin() + 4),
            (std::vector<int64_t>{6, 17, 32, 49}));
}

TEST(EngramHash, DeadTokensBlockEverythingBeyond) {
  // (4, DEAD, 8) at position 2: t = (8, pad, pad) even though 4 is in range.
  Hash h;
  ASSERT_TRUE(h.Run({4, kEngramDead, 8}, 2).ok());
  EXPECT_EQ(h.rows, (std::vector<int64_t>{7, 16, 35, 50}));  // 24^10 = 18, 18^14 = 28
  EXPECT_FALSE(h.Run({4, -5, 8}, 2).ok());
}

TEST(EngramHash, ChunkedEqualsWhole) {
  std::vector<int64_t> history = {9, 3, 3, 0, 7, kEngramDead, 5, 6};
  Hash whole, tail;
  ASSERT_TRUE(whole.Run(history, 0).ok());
  ASSERT_TRUE(tail.Run(history, 5).ok());
  EXPECT_EQ(std::vector<int64_t>(whole.rows.begin() + 5 * 4, whole.rows.end()), tail.rows);
}

TEST(EngramLookup, DequantizesFp8Rows) {
  std::vector<float> rows(3 * 32);
  for (int i = 0; i < 96; ++i) rows[i] = 0.25f * (i % 7) - (i / 32);
  std::vector<uint8_t> codes(96), scales(3);
  ASSERT_TRUE(QuantizeFp8(rows, 32, codes, scales).ok());
  std::vector<int64_t> ids = {2, 0};
  std::vector<float> out(64);
  ASSERT_TRUE(EngramLookup(codes, scales, 3, 32, ids, out).ok());
  for (int c = 0; c < 32; ++c) {
    EXPECT_EQ(out[c], rows[64 + c]);  // these values are exact in FP8
    EXPECT_EQ(out[32 + c], rows[c]);
  }
  std::vector<int64_t> bad = {3};
  std::vector<float> one(32);
  EXPECT_FALSE(EngramLookup(codes, scales, 3, 32, bad, one).ok());
}

TEST(EngramGate, SignedSqrtSigmoidGate) {
  // n = 1, d = 2: X = (3, 4), key = (1, 0), weight 1: dot = 3 / sqrt(12.5) / sqrt(.5) / sqrt(2)
  // = .848528; gate = sigmoid(sqrt(.848528)) = .7152776.
  std::vector<float> x = {3, 4}, key = {1, 0}, value = {1, -2}, w = {1, 1};
  ASSERT_TRUE(EngramGate({.x = x, .key = key, .value = value, .weight = w, .tokens = 1,
                          .hc_mult = 1, .dim = 2, .bf16_boundaries = false}).ok());
  EXPECT_NEAR(x[0], 3 + 0.7152776f, 1e-6f);
  EXPECT_NEAR(x[1], 4 - 2 * 0.7152776f, 1e-6f);
  // Negative key: sigmoid(-sqrt(.848528)) = 1 - .7152776.
  std::vector<float> y = {3, 4}, neg = {-1, 0};
  ASSERT_TRUE(EngramGate({.x = y, .key = neg, .value = value, .weight = w, .tokens = 1,
                          .hc_mult = 1, .dim = 2, .bf16_boundaries = false}).ok());
  EXPECT_NEAR(y[0], 3 + (1 - 0.7152776f), 1e-6f);
}

TEST(EngramGate, MaskedTokensAndOrthogonalKeys) {
  // Two streams; stream 1's key is orthogonal: |dot| clamps to 1e-6, gate =
  // sigmoid(1e-3). Token mask 0 leaves the streams untouched.
  std::vector<float> x = {1, 0, 0, 1}, key = {1, 0, 1, 0}, value = {2, 2}, w = {1, 1, 1, 1};
  std::vector<uint8_t> on = {1}, off = {0};
  std::vector<float> masked = x;
  ASSERT_TRUE(EngramGate({.x = masked, .key = key, .value = value, .weight = w,
                          .token_mask = off, .tokens = 1, .hc_mult = 2, .dim = 2}).ok());
  EXPECT_EQ(masked, x);
  ASSERT_TRUE(EngramGate({.x = x, .key = key, .value = value, .weight = w, .token_mask = on,
                          .tokens = 1, .hc_mult = 2, .dim = 2, .bf16_boundaries = false}).ok());
  const float g1 = 1.0f / (1.0f + std::exp(-1e-3f));
  EXPECT_NEAR(x[2], 2 * g1, 1e-6f);
  EXPECT_NEAR(x[3], 1 + 2 * g1, 1e-6f);
  std::vector<float> bad(3);
  EXPECT_FALSE(EngramGate({.x = bad, .key = key, .value = value, .weight = w, .tokens = 1,
                           .hc_mult = 2, .dim = 2}).ok());
}

}  // namespace
}  // namespace weir::kernels::cpu
