// MarkovDraft against the decoder's loop it replaces (CopyRows of the
// embedding rows by prev, CopyRows into the features, DotRows for the bias,
// MarkovArgmax), position by position on the same inputs: logits, features,
// tokens and prev bit for bit, with tied maxima, out-of-range prev tokens and
// ranks that span one and two of DotRows' warps. GPU machine only (tag gpu).
#include "kernels/cuda/decode/markov.h"

#include <cuda_runtime.h>

#include <cstdint>
#include <random>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/decode/dot_rows.h"
#include "kernels/cuda/decode/rows.h"
#include "kernels/cuda/decode/test_util.h"

namespace weir::kernels::cuda::decode {
namespace {

using testing::DeviceBuffer;
using testing::SameBits;

std::vector<float> Random(size_t n, std::mt19937& rng, float scale) {
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> v(n);
  for (float& f : v) f = normal(rng);
  return v;
}

struct Outputs {
  std::vector<float> logits, features;
  std::vector<int64_t> tokens;
  std::vector<int32_t> prev;
};

// (sequences, vocab, rank, block)
class MarkovDraftShapes
    : public ::testing::TestWithParam<std::tuple<int64_t, int64_t, int64_t, int>> {};

TEST_P(MarkovDraftShapes, GivesTheLoopsBits) {
  const auto [sequences, vocab, rank, block] = GetParam();
  std::mt19937 rng(static_cast<uint32_t>(sequences * 7919 + vocab * 31 + rank * 3 + block));
  const int64_t rows = sequences * block, feature_offset = 12, stride = feature_offset + rank + 4;
  std::vector<float> logits = Random(rows * vocab, rng, 2.0f);
  // Coarse values in some rows so that maxima tie (the lower index wins).
  for (int64_t r = 0; r < rows; r += 2) {
    for (int64_t t = 0; t < vocab; ++t) logits[r * vocab + t] = static_cast<float>(t % 3);
  }
  const std::vector<float> embed = Random(vocab * rank, rng, 1.0f);
  std::vector<float> head = Random(vocab * rank, rng, 0.5f);
  if (vocab > 8) {  // a zero row of the head: its bias is +0 whatever e is
    for (int64_t c = 0; c < rank; ++c) head[5 * rank + c] = 0.0f;
  }
  std::vector<int32_t> prev(sequences);
  std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(vocab - 1));
  for (int64_t r = 0; r < sequences; ++r) prev[r] = token(rng);
  prev[0] = -1;  // outside the table: e reads as zeros (CopyRows' rule)
  if (sequences > 1) prev[1] = static_cast<int32_t>(vocab);
  const std::vector<float> features0 = Random(rows * stride, rng, 1.0f);

  DeviceBuffer<float> d_embed(embed), d_head(head);
  auto run = [&](bool fused) -> Outputs {
    DeviceBuffer<float> d_logits(logits), d_features(features0), d_e(sequences * rank),
        d_bias(sequences * vocab);
    DeviceBuffer<int64_t> d_tokens(rows);
    DeviceBuffer<int32_t> d_prev(prev);
    d_tokens.Poison();
    if (fused) {
      EXPECT_TRUE(MarkovDraft({.logits = d_logits.get(),
                               .embed = d_embed.get(),
                               .head = d_head.get(),
                               .features = d_features.get(),
                               .tokens = d_tokens.get(),
                               .prev = d_prev.get(),
                               .sequences = sequences,
                               .vocab = vocab,
                               .rank = rank,
                               .feature_stride = stride,
                               .feature_offset = feature_offset,
                               .block = block},
                              nullptr)
                      .ok());
    } else {
      for (int i = 0; i < block; ++i) {
        EXPECT_TRUE(CopyRows({.src = d_embed.get(),
                              .dst = d_e.get(),
                              .src_rows = d_prev.get(),
                              .rows = sequences,
                              .width = rank,
                              .src_capacity = vocab},
                             nullptr)
                        .ok());
        EXPECT_TRUE(CopyRows({.src = d_e.get(),
                              .dst = d_features.get() + i * stride + feature_offset,
                              .rows = sequences,
                              .width = rank,
                              .src_stride = rank,
                              .dst_stride = block * stride},
                             nullptr)
                        .ok());
        EXPECT_TRUE(DotRows({.x = d_e.get(),
                             .w = d_head.get(),
                             .y = d_bias.get(),
                             .rows = sequences,
                             .out = vocab,
                             .k = rank},
                            nullptr)
                        .ok());
        EXPECT_TRUE(MarkovArgmax({.logits = d_logits.get(),
                                  .bias = d_bias.get(),
                                  .tokens = d_tokens.get(),
                                  .prev = d_prev.get(),
                                  .sequences = sequences,
                                  .vocab = vocab,
                                  .block = block,
                                  .step = i},
                                 nullptr)
                        .ok());
      }
    }
    return {d_logits.Download(), d_features.Download(), d_tokens.Download(), d_prev.Download()};
  };
  const Outputs loop = run(false), fused = run(true);
  EXPECT_TRUE(SameBits(fused.logits, loop.logits));
  EXPECT_TRUE(SameBits(fused.features, loop.features));
  EXPECT_EQ(fused.tokens, loop.tokens);
  EXPECT_EQ(fused.prev, loop.prev);
  // The block is the Markov chain: each draft is its row's first maximum.
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = fused.logits.data() + r * vocab;
    int64_t best = 0;
    for (int64_t t = 1; t < vocab; ++t) {
      if (row[best] < row[t]) best = t;
    }
    EXPECT_EQ(fused.tokens[r], best) << "row " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, MarkovDraftShapes,
    ::testing::Values(std::make_tuple(int64_t{1}, int64_t{4096}, int64_t{16}, 5),
                      std::make_tuple(int64_t{3}, int64_t{4096}, int64_t{16}, 5),
                      std::make_tuple(int64_t{2}, int64_t{1000}, int64_t{64}, 4),
                      std::make_tuple(int64_t{5}, int64_t{777}, int64_t{132}, 3),
                      std::make_tuple(int64_t{2}, int64_t{2048}, int64_t{256}, 2),
                      std::make_tuple(int64_t{4}, int64_t{7}, int64_t{4}, 1)));

TEST(MarkovDraftTest, RefusesWhatItCannotTake) {
  MarkovDraftParams p{.sequences = 0, .vocab = 4096, .rank = 16, .feature_stride = 16};
  EXPECT_TRUE(SupportsMarkovDraft(p));
  EXPECT_TRUE(MarkovDraft(p, nullptr).ok());  // nothing to do
  MarkovDraftParams bad = p;
  bad.rank = 18;  // not a multiple of 4
  bad.feature_stride = 18;
  EXPECT_FALSE(SupportsMarkovDraft(bad));
  EXPECT_EQ(MarkovDraft(bad, nullptr).code(), absl::StatusCode::kInvalidArgument);
  bad = p;
  bad.vocab = 129280;  // V4.1's head of rank 16 is past one CTA's share
  EXPECT_FALSE(SupportsMarkovDraft(bad));
  bad = p;
  bad.feature_offset = 1;  // the features' columns pass their stride
  EXPECT_FALSE(SupportsMarkovDraft(bad));
  bad = p;
  bad.sequences = 1;  // pointers needed
  EXPECT_FALSE(SupportsMarkovDraft(bad));
  bad = p;
  bad.block = 0;
  EXPECT_FALSE(SupportsMarkovDraft(bad));
}

}  // namespace
}  // namespace weir::kernels::cuda::decode
