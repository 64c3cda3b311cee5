#include "kernels/cuda/decode/rows.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/common/numeric_formats.h"
#include "kernels/cuda/decode/test_util.h"
#include "kernels/cuda/rope.h"

namespace weir::kernels::cuda::decode {
namespace {

using testing::Bits;
using testing::DeviceBuffer;
using testing::FromBits;
using testing::SameBits;

// Random normal floats of mixed magnitudes; every 97th value is a NaN with a
// payload, so bitwise copies are checked on payloads too.
std::vector<float> RandomFloats(size_t n, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-20, 20);
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) {
    v[i] = i % 97 == 96 ? FromBits(0x7F800000u | (0x12345u + static_cast<uint32_t>(i)))
                        : std::ldexp(normal(rng), exponent(rng));
  }
  return v;
}

// ---- EmbedStreams -----------------------------------------------------------

TEST(EmbedStreamsTest, RepeatsTheEmbeddingRowOfEveryToken) {
  struct Case {
    int64_t tokens, vocab, dim;
    int copies;
    bool with_bad;
  };
  for (const Case& c : {Case{1, 11, 5120, 4, false}, Case{3, 50, 7, 1, false},
                        Case{17, 50, 300, 4, true}, Case{5, 3, 1, 3, true},
                        Case{64, 1000, 512, 2, false}}) {
    std::mt19937 rng(c.tokens * 131 + c.dim);
    const std::vector<float> embed = RandomFloats(c.vocab * c.dim, rng);
    std::uniform_int_distribution<int64_t> id(0, c.vocab - 1);
    std::vector<int64_t> tokens(c.tokens);
    for (int64_t& t : tokens) t = id(rng);
    int32_t bad = 0;
    if (c.with_bad) {
      tokens[0] = -1;
      tokens[c.tokens / 2] = c.vocab;  // one past the end
      tokens[c.tokens - 1] = std::numeric_limits<int64_t>::max();
      bad = c.tokens >= 3 ? 3 : 2;
    }
    std::vector<float> want(c.tokens * c.copies * c.dim);
    for (int64_t t = 0; t < c.tokens; ++t) {
      const bool ok = tokens[t] >= 0 && tokens[t] < c.vocab;
      for (int k = 0; k < c.copies; ++k) {
        for (int64_t ch = 0; ch < c.dim; ++ch) {
          want[(t * c.copies + k) * c.dim + ch] =
              ok ? embed[tokens[t] * c.dim + ch] : FromBits(0x7FC00000u);
        }
      }
    }
    DeviceBuffer<float> d_embed(embed), d_out(want.size());
    DeviceBuffer<int64_t> d_tokens(tokens);
    DeviceBuffer<int32_t> d_bad(std::vector<int32_t>{5});  // counts add to what is there
    d_out.Poison(0x5A);
    ASSERT_TRUE(EmbedStreams({.embed = d_embed.get(), .token_ids = d_tokens.get(),
                              .out = d_out.get(), .bad_count = d_bad.get(), .tokens = c.tokens,
                              .vocab = c.vocab, .dim = c.dim, .copies = c.copies},
                             nullptr)
                    .ok());
    EXPECT_TRUE(SameBits(d_out.Download(), want))
        << "tokens " << c.tokens << " dim " << c.dim << " copies " << c.copies;
    EXPECT_EQ(d_bad.Download()[0], 5 + bad) << "tokens " << c.tokens;
    // Without a counter the rows are the same.
    d_out.Poison(0x5A);
    ASSERT_TRUE(EmbedStreams({.embed = d_embed.get(), .token_ids = d_tokens.get(),
                              .out = d_out.get(), .tokens = c.tokens, .vocab = c.vocab,
                              .dim = c.dim, .copies = c.copies},
                             nullptr)
                    .ok());
    EXPECT_TRUE(SameBits(d_out.Download(), want)) << "no counter, tokens " << c.tokens;
  }
}

// ---- RoundBf16 --------------------------------------------------------------

TEST(RoundBf16Test, MatchesTheCpuRoundingOnEveryKindOfValue) {
  const std::vector<uint32_t> special = {
      0x00000000u, 0x80000000u,  // +-0
      0x7F800000u, 0xFF800000u,  // +-Inf
      0x7F800001u, 0xFF800001u,  // signaling NaNs (become quiet)
      0x7FC00000u, 0xFFC12345u, 0x7FFFFFFFu, 0x7FBFFFFFu,  // NaNs with payloads
      0x7F7FFFFFu, 0xFF7FFFFFu,  // +-max float: rounds to +-Inf
      0x7F7F7FFFu, 0x7F7F8000u,  // just below / at the tie to Inf
      0x00000001u, 0x807FFFFFu, 0x00008000u, 0x00018000u,  // subnormals, ties
      0x3F808000u, 0x3F818000u,  // ties to even: down / up
      0x3F807FFFu, 0x3F808001u,  // just below / above a tie
  };
  // n: one element, one partial block, more than the launcher's maximum grid
  // covers in one pass (65535 blocks x 256), so the grid-stride loop wraps.
  for (int64_t n : {int64_t{1}, int64_t{1000}, int64_t{65535} * 256 + 1001}) {
    std::mt19937 rng(static_cast<uint32_t>(n));
    std::uniform_int_distribution<uint32_t> any_bits;
    std::vector<float> x(n);
    for (int64_t i = 0; i < n; ++i) {
      if (i < static_cast<int64_t>(special.size())) {
        x[i] = FromBits(special[i]);
      } else if (i % 2 == 0) {
        x[i] = FromBits(any_bits(rng));  // every exponent, NaNs included
      } else {
        x[i] = FromBits((any_bits(rng) & 0xFFFF0000u) | 0x8000u);  // exact ties
      }
    }
    std::vector<float> want(x);
    for (float& v : want) v = kernels::RoundToBf16(v);
    DeviceBuffer<float> d_x(x);
    ASSERT_TRUE(RoundBf16({.x = d_x.get(), .n = n}, nullptr).ok());
    EXPECT_TRUE(SameBits(d_x.Download(), want)) << "n " << n;
  }
}

// ToBf16 writes the bits RoundBf16 leaves in the upper half (NaNs included).
TEST(ToBf16Test, WritesTheRoundedBits) {
  const int64_t n = 70001;
  std::mt19937 rng(3);
  std::uniform_int_distribution<uint32_t> any_bits;
  std::vector<float> x(n);
  for (float& v : x) v = FromBits(any_bits(rng));
  x[0] = FromBits(0x3F808000u);  // a tie
  DeviceBuffer<float> d_x(x);
  DeviceBuffer<uint16_t> d_out(std::vector<uint16_t>(n, 0));
  ASSERT_TRUE(ToBf16({.x = d_x.get(), .out = d_out.get(), .n = n}, nullptr).ok());
  const std::vector<uint16_t> got = d_out.Download();
  int64_t bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    uint32_t want;
    const float r = kernels::RoundToBf16(x[i]);
    std::memcpy(&want, &r, 4);
    bad += got[i] != static_cast<uint16_t>(want >> 16);
  }
  EXPECT_EQ(bad, 0);
  EXPECT_EQ(ToBf16({.x = d_x.get(), .out = nullptr, .n = 1}, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  // RandomFill's bf16 output holds the bits of its fp32 output.
  DeviceBuffer<float> f(std::vector<float>(n, 0.0f));
  ASSERT_TRUE(RandomFill({.x = f.get(), .n = n, .seed = 4, .scale = 0.5f}, nullptr).ok());
  ASSERT_TRUE(RandomFill({.bf16 = d_out.get(), .n = n, .seed = 4, .scale = 0.5f}, nullptr).ok());
  const std::vector<float> vf = f.Download();
  const std::vector<uint16_t> vb = d_out.Download();
  bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, &vf[i], 4);
    bad += (bits & 0xFFFFu) != 0 || vb[i] != static_cast<uint16_t>(bits >> 16);
  }
  EXPECT_EQ(bad, 0);
}

// ---- Scale ------------------------------------------------------------------

TEST(ScaleTest, IsOneRoundedMultiplyLikeTheCpu) {
  for (int64_t n : {int64_t{1}, int64_t{4097}}) {
    std::mt19937 rng(static_cast<uint32_t>(n) + 7);
    std::uniform_real_distribution<float> value(-3.0f, 3.0f);
    std::vector<float> x(n);
    for (float& v : x) v = value(rng);
    x[0] = 1.17549435e-38f;  // the smallest normal: the product is subnormal
    const float factor = static_cast<float>(1.0 / std::sqrt(128.0) / std::sqrt(8.0));
    std::vector<float> want(x);
    for (float& v : want) v *= factor;  // the host loop of worker/model/indexer.cc
    DeviceBuffer<float> d_x(x);
    ASSERT_TRUE(Scale({.x = d_x.get(), .n = n, .factor = factor}, nullptr).ok());
    EXPECT_TRUE(SameBits(d_x.Download(), want)) << "n " << n;
    // round_bf16: the product, then RoundBf16's rounding, in one launch.
    for (float& v : want) v = kernels::RoundToBf16(v);
    d_x.Upload(x);
    ASSERT_TRUE(
        Scale({.x = d_x.get(), .n = n, .factor = factor, .round_bf16 = true}, nullptr).ok());
    EXPECT_TRUE(SameBits(d_x.Download(), want)) << "rounded, n " << n;
  }
  EXPECT_EQ(Scale({.x = nullptr, .n = 3}, nullptr).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Scale({.x = nullptr, .n = 0}, nullptr).ok());
}

// ---- RandomFill / RandomBytes -------------------------------------------------

TEST(RandomFillTest, IsDeterministicBoundedAndBf16) {
  const int64_t n = 100003;
  DeviceBuffer<float> a(std::vector<float>(n, 0.0f)), b(std::vector<float>(n, 0.0f)),
      other(std::vector<float>(n, 0.0f));
  ASSERT_TRUE(RandomFill({.x = a.get(), .n = n, .seed = 5, .scale = 0.25f}, nullptr).ok());
  ASSERT_TRUE(RandomFill({.x = b.get(), .n = n, .seed = 5, .scale = 0.25f}, nullptr).ok());
  ASSERT_TRUE(RandomFill({.x = other.get(), .n = n, .seed = 6, .scale = 0.25f}, nullptr).ok());
  const std::vector<float> va = a.Download(), vb = b.Download(), vo = other.Download();
  EXPECT_TRUE(SameBits(va, vb));
  int64_t same = 0, negative = 0;
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_TRUE(std::isfinite(va[i]));
    ASSERT_LE(std::fabs(va[i]), 0.25f);
    ASSERT_EQ(va[i], kernels::RoundToBf16(va[i]));
    same += va[i] == vo[i];
    negative += va[i] < 0;
    sum += va[i];
  }
  EXPECT_LT(same, n / 50);  // another seed, other values
  EXPECT_NEAR(static_cast<double>(negative) / n, 0.5, 0.02);
  EXPECT_NEAR(sum / n, 0.0, 0.005);
}

TEST(RandomBytesTest, CoversEveryByteValue) {
  const int64_t n = 1 << 16;
  DeviceBuffer<uint8_t> a(std::vector<uint8_t>(n, 0));
  ASSERT_TRUE(RandomBytes({.x = a.get(), .n = n, .seed = 9}, nullptr).ok());
  std::vector<int64_t> count(256, 0);
  for (uint8_t v : a.Download()) ++count[v];
  for (int v = 0; v < 256; ++v) {
    EXPECT_GT(count[v], n / 256 / 2) << "byte " << v;
    EXPECT_LT(count[v], n / 256 * 2) << "byte " << v;
  }
  EXPECT_EQ(RandomBytes({.x = nullptr, .n = 1}, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
}

// ---- CopyRows ---------------------------------------------------------------

struct CopyCase {
  const char* name;
  int64_t src_count, dst_count, rows, width, src_stride, dst_stride;
  bool gather, scatter;
  int64_t src_capacity = 0, dst_capacity = 0;
};

TEST(CopyRowsTest, GathersAndScattersRowsExactly) {
  const CopyCase cases[] = {
      {"plain", 4, 4, 4, 33, 0, 0, false, false},
      {"one row", 1, 1, 1, 1, 0, 0, false, false},
      {"gather", 10, 6, 6, 300, 0, 0, true, false},
      {"scatter strided", 5, 12, 5, 17, 20, 40, false, true},
      {"gather+scatter", 9, 9, 7, 129, 130, 0, true, true},
      {"bounded", 6, 8, 8, 64, 0, 64, true, true, 6, 8},
      {"wide", 3, 5, 3, 5120, 0, 5120 * 2, true, true},
  };
  for (const CopyCase& c : cases) {
    std::mt19937 rng(c.width * 7 + c.rows);
    const int64_t src_stride = c.src_stride == 0 ? c.width : c.src_stride;
    const int64_t dst_stride = c.dst_stride == 0 ? c.width : c.dst_stride;
    const std::vector<float> src = RandomFloats(c.src_count * src_stride, rng);
    const std::vector<float> dst0 = RandomFloats(c.dst_count * dst_stride, rng);
    std::vector<int32_t> src_rows, dst_rows;
    if (c.gather) {
      std::uniform_int_distribution<int32_t> any(0, static_cast<int32_t>(c.src_count) - 1);
      for (int64_t i = 0; i < c.rows; ++i) src_rows.push_back(any(rng));
      src_rows[0] = -1;  // zeros
      if (c.src_capacity > 0) src_rows[c.rows - 1] = static_cast<int32_t>(c.src_capacity);
    }
    if (c.scatter) {  // distinct destinations, one skipped
      std::vector<int32_t> perm(c.dst_count);
      for (int64_t i = 0; i < c.dst_count; ++i) perm[i] = static_cast<int32_t>(i);
      std::shuffle(perm.begin(), perm.end(), rng);
      dst_rows.assign(perm.begin(), perm.begin() + c.rows);
      dst_rows[c.rows / 2] = -1;
      if (c.dst_capacity > 0) dst_rows[1] = static_cast<int32_t>(c.dst_capacity) + 3;
    }
    std::vector<float> want(dst0);
    for (int64_t i = 0; i < c.rows; ++i) {
      const int64_t s = c.gather ? src_rows[i] : i, d = c.scatter ? dst_rows[i] : i;
      if (d < 0 || (c.dst_capacity > 0 && d >= c.dst_capacity)) continue;
      const bool zero = s < 0 || (c.src_capacity > 0 && s >= c.src_capacity);
      for (int64_t ch = 0; ch < c.width; ++ch) {
        want[d * dst_stride + ch] = zero ? 0.0f : src[s * src_stride + ch];
      }
    }
    DeviceBuffer<float> d_src(src), d_dst(dst0);
    DeviceBuffer<int32_t> d_src_rows(src_rows), d_dst_rows(dst_rows);
    ASSERT_TRUE(CopyRows({.src = d_src.get(), .dst = d_dst.get(),
                          .src_rows = c.gather ? d_src_rows.get() : nullptr,
                          .dst_rows = c.scatter ? d_dst_rows.get() : nullptr, .rows = c.rows,
                          .width = c.width, .src_stride = c.src_stride,
                          .dst_stride = c.dst_stride, .src_capacity = c.src_capacity,
                          .dst_capacity = c.dst_capacity},
                         nullptr)
                    .ok())
        << c.name;
    // Rows not written (skipped, or the gaps of a stride) keep their bits.
    EXPECT_TRUE(SameBits(d_dst.Download(), want)) << c.name;
  }
}

// ---- SwapAxes ---------------------------------------------------------------

TEST(SwapAxesTest, TransposesTheLeadingAxes) {
  for (auto [a, b, width] : {std::tuple<int64_t, int64_t, int64_t>{1, 1, 1},
                             {4, 3, 5120},
                             {1, 7, 33},
                             {9, 1, 2},
                             {6, 4, 1},
                             {17, 5, 129},
                             {3, 2, 2049}}) {
    std::mt19937 rng(a * 100 + b * 10 + width);
    const std::vector<float> src = RandomFloats(a * b * width, rng);
    std::vector<float> want(src.size());
    for (int64_t i = 0; i < a; ++i) {
      for (int64_t j = 0; j < b; ++j) {
        for (int64_t c = 0; c < width; ++c) {
          want[(j * a + i) * width + c] = src[(i * b + j) * width + c];
        }
      }
    }
    DeviceBuffer<float> d_src(src), d_dst(src.size());
    d_dst.Poison();
    ASSERT_TRUE(SwapAxes({.src = d_src.get(), .dst = d_dst.get(), .a = a, .b = b, .width = width},
                         nullptr)
                    .ok());
    EXPECT_TRUE(SameBits(d_dst.Download(), want)) << a << "x" << b << "x" << width;
    // dst_bf16: ToBf16's bits of the same transpose.
    DeviceBuffer<uint16_t> want16(src.size()), got16(src.size());
    ASSERT_TRUE(
        ToBf16({.x = d_dst.get(), .out = want16.get(), .n = static_cast<int64_t>(src.size())},
               nullptr)
            .ok());
    got16.Poison();
    ASSERT_TRUE(
        SwapAxes({.src = d_src.get(), .dst_bf16 = got16.get(), .a = a, .b = b, .width = width},
                 nullptr)
            .ok());
    EXPECT_EQ(got16.Download(), want16.Download()) << "bf16, " << a << "x" << b << "x" << width;
  }
}

// With a RoPE: the bits of ApplyRope (by-position table) on src, then the
// copy, forward and inverse, rounded or not, a position past the table
// (its rotated dims NaN), V4.1's o shape (8 heads of 512 a group row) and odd
// sizes.
TEST(SwapAxesTest, RopeOnTheWayGivesApplyRopeThenTheCopy) {
  struct Case {
    int64_t a, b;
    int heads, head_dim, rope_dim;
  };
  for (const Case c : {Case{3, 8, 8, 512, 64}, Case{1, 2, 1, 6, 2}, Case{5, 3, 2, 16, 16},
                       Case{2, 1, 3, 130, 64}}) {
    for (const bool inverse : {false, true}) {
      for (const bool round : {false, true}) {
        std::mt19937 rng(c.a * 1000 + c.head_dim + inverse * 7 + round);
        const int64_t width = int64_t{c.heads} * c.head_dim;
        std::vector<float> src = RandomFloats(c.a * c.b * width, rng);
        if (round) {  // the decoder rounds before the rotation; the copy keeps bits
          for (float& v : src) v = RoundToBf16(v);
        }
        const int64_t rows = 40;
        std::vector<float> table(rows * c.rope_dim);  // finite cos / sin stand-ins
        std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
        for (float& v : table) v = unit(rng);
        std::vector<int64_t> positions(c.a);
        for (int64_t i = 0; i < c.a; ++i) positions[i] = static_cast<int64_t>(rng() % rows);
        positions[c.a - 1] = rows + 3;  // past the table: NaN in its rotated dims
        DeviceBuffer<float> d_src(src), d_dst(src.size()), d_table(table), d_want(src),
            d_want_dst(src.size());
        DeviceBuffer<int64_t> d_pos(positions);
        // The two launches the fused copy replaces.
        ASSERT_TRUE(ApplyRope({.x = d_want.get(),
                               .positions = d_pos.get(),
                               .cos_sin = d_table.get(),
                               .num_tokens = c.a,
                               .num_heads = static_cast<int>(c.b) * c.heads,
                               .head_dim = c.head_dim,
                               .rope_dim = c.rope_dim,
                               .inverse = inverse,
                               .cos_sin_by_position = true,
                               .cos_sin_rows = rows,
                               .round_bf16 = round},
                              nullptr)
                        .ok());
        ASSERT_TRUE(
            SwapAxes(
                {.src = d_want.get(), .dst = d_want_dst.get(), .a = c.a, .b = c.b, .width = width},
                nullptr)
                .ok());
        d_dst.Poison();
        ASSERT_TRUE(SwapAxes({.src = d_src.get(),
                              .dst = d_dst.get(),
                              .a = c.a,
                              .b = c.b,
                              .width = width,
                              .rope_positions = d_pos.get(),
                              .rope_cos_sin = d_table.get(),
                              .rope_cos_sin_rows = rows,
                              .rope_head_dim = c.head_dim,
                              .rope_dim = c.rope_dim,
                              .rope_inverse = inverse,
                              .rope_round_bf16 = round},
                             nullptr)
                        .ok());
        const std::vector<float> got = d_dst.Download(), want = d_want_dst.Download();
        EXPECT_TRUE(SameBits(got, want))
            << c.a << "x" << c.b << "x" << c.heads << "x" << c.head_dim << " rope " << c.rope_dim
            << (inverse ? " inverse" : "") << (round ? " rounded" : "");
        EXPECT_TRUE(SameBits(d_src.Download(), src)) << "src is read only";
        // The last token is past the table: its rotated dims are NaN.
        const int64_t last = (c.a - 1) * width;  // dst row (j = 0, i = a - 1)
        EXPECT_TRUE(std::isnan(got[last + c.head_dim - 1]));
      }
    }
  }
}

// ---- StreamMean -------------------------------------------------------------

TEST(StreamMeanTest, IsBitIdenticalToTheBackboneLoop) {
  struct Case {
    int64_t tokens, dim;
    int copies;
    int64_t out_stride;
  };
  for (const Case& c : {Case{1, 5120, 4, 0}, Case{5, 129, 4, 0}, Case{3, 64, 3, 64 * 3},
                        Case{2, 1, 1, 0}, Case{7, 512, 4, 512 * 2 + 5}}) {
    std::mt19937 rng(c.tokens * 17 + c.dim + c.copies);
    std::vector<float> x = RandomFloats(c.tokens * c.copies * c.dim, rng);
    for (float& v : x) {  // finite values: the sums' rounding is what is checked
      if (std::isnan(v)) v = 1.5f;
    }
    const int64_t stride = c.out_stride == 0 ? c.dim : c.out_stride;
    const std::vector<float> out0 = RandomFloats(c.tokens * stride, rng);
    std::vector<float> want(out0);
    // The CPU loop of worker/model/model.cc RunBackbone (main_hidden).
    for (int64_t t = 0; t < c.tokens; ++t) {
      float* dst = want.data() + t * stride;
      for (int64_t ch = 0; ch < c.dim; ++ch) {
        float sum = 0.0f;
        for (int64_t k = 0; k < c.copies; ++k) sum += x[(t * c.copies + k) * c.dim + ch];
        dst[ch] = sum / static_cast<float>(c.copies);
      }
    }
    DeviceBuffer<float> d_x(x), d_out(out0);
    ASSERT_TRUE(StreamMean({.x = d_x.get(), .out = d_out.get(), .tokens = c.tokens,
                            .dim = c.dim, .copies = c.copies, .out_stride = c.out_stride},
                           nullptr)
                    .ok());
    EXPECT_TRUE(SameBits(d_out.Download(), want))
        << c.tokens << "x" << c.copies << "x" << c.dim << " stride " << c.out_stride;
  }
}

// ---- Arguments --------------------------------------------------------------

TEST(RowsArgumentsTest, RefusesBadParamsAndSkipsEmptyWork) {
  float* f = reinterpret_cast<float*>(256);
  int32_t* i32 = reinterpret_cast<int32_t*>(256);
  const int64_t* i64 = reinterpret_cast<const int64_t*>(256);
  constexpr auto kInvalid = absl::StatusCode::kInvalidArgument;
  // EmbedStreams.
  EXPECT_EQ(EmbedStreams({.embed = f, .token_ids = i64, .out = f, .tokens = -1, .vocab = 4, .dim = 4},
                         nullptr)
                .code(),
            kInvalid);
  EXPECT_EQ(EmbedStreams({.embed = f, .token_ids = nullptr, .out = f, .tokens = 2, .vocab = 4,
                          .dim = 4},
                         nullptr)
                .code(),
            kInvalid);
  EXPECT_EQ(EmbedStreams({.embed = nullptr, .token_ids = i64, .out = f, .tokens = 2, .vocab = 4,
                          .dim = 4},
                         nullptr)
                .code(),
            kInvalid);
  EXPECT_EQ(EmbedStreams({.embed = f, .token_ids = i64, .out = f, .tokens = 2, .vocab = 4, .dim = 4,
                          .copies = -1},
                         nullptr)
                .code(),
            kInvalid);
  EXPECT_TRUE(EmbedStreams({.tokens = 0, .vocab = 4, .dim = 4}, nullptr).ok());
  // RoundBf16.
  EXPECT_EQ(RoundBf16({.x = f, .n = -1}, nullptr).code(), kInvalid);
  EXPECT_EQ(RoundBf16({.x = nullptr, .n = 3}, nullptr).code(), kInvalid);
  EXPECT_TRUE(RoundBf16({.x = nullptr, .n = 0}, nullptr).ok());
  // CopyRows.
  EXPECT_EQ(CopyRows({.src = f, .dst = f, .rows = 2, .width = 8, .src_stride = 4}, nullptr).code(),
            kInvalid);
  EXPECT_EQ(CopyRows({.src = f, .dst = f, .rows = 2, .width = 8, .dst_stride = 7}, nullptr).code(),
            kInvalid);
  EXPECT_EQ(CopyRows({.src = nullptr, .dst = f, .rows = 2, .width = 8}, nullptr).code(), kInvalid);
  EXPECT_EQ(CopyRows({.src = f, .dst = f, .rows = -2, .width = 8}, nullptr).code(), kInvalid);
  EXPECT_EQ(CopyRows({.src = f, .dst = f, .src_rows = i32, .rows = 2, .width = 8,
                      .src_capacity = -1},
                     nullptr)
                .code(),
            kInvalid);
  EXPECT_TRUE(CopyRows({.rows = 0, .width = 8}, nullptr).ok());
  EXPECT_TRUE(CopyRows({.rows = 5, .width = 0}, nullptr).ok());
  // SwapAxes.
  EXPECT_EQ(SwapAxes({.src = f, .dst = f, .a = 2, .b = -1, .width = 3}, nullptr).code(), kInvalid);
  EXPECT_EQ(SwapAxes({.src = f, .dst = nullptr, .a = 2, .b = 2, .width = 3}, nullptr).code(),
            kInvalid);
  EXPECT_EQ(SwapAxes({.src = f, .dst = f, .a = int64_t{1} << 40, .b = int64_t{1} << 40,
                      .width = 1},
                     nullptr)
                .code(),
            kInvalid);  // the element count overflows int64
  EXPECT_TRUE(SwapAxes({.a = 2, .b = 0, .width = 3}, nullptr).ok());
  uint16_t* const h = reinterpret_cast<uint16_t*>(f);
  EXPECT_EQ(
      SwapAxes({.src = f, .dst = f, .dst_bf16 = h, .a = 2, .b = 2, .width = 3}, nullptr).code(),
      kInvalid);  // both outputs
  EXPECT_EQ(SwapAxes({.src = f, .dst_bf16 = h, .a = 2, .b = 2, .width = int64_t{1} << 26}, nullptr)
                .code(),
            kInvalid);  // bf16 output takes the row kernel's limits
  // SwapAxes' RoPE: positions, a table, an even rope_dim <= head_dim dividing
  // nothing but a width that is a multiple of the head.
  const int64_t* pos = reinterpret_cast<const int64_t*>(f);
  const SwapAxesParams roped{.src = f,
                             .dst = f + 64,
                             .a = 2,
                             .b = 2,
                             .width = 16,
                             .rope_positions = pos,
                             .rope_cos_sin = f,
                             .rope_cos_sin_rows = 4,
                             .rope_head_dim = 8,
                             .rope_dim = 4};
  EXPECT_TRUE(SupportsSwapAxes(roped));
  for (auto bad :
       {+[](SwapAxesParams& q) { q.rope_positions = nullptr; },
        +[](SwapAxesParams& q) { q.rope_cos_sin_rows = 0; },
        +[](SwapAxesParams& q) { q.rope_dim = 3; }, +[](SwapAxesParams& q) { q.rope_dim = 0; },
        +[](SwapAxesParams& q) { q.rope_dim = 10; }, +[](SwapAxesParams& q) { q.width = 12; },
        +[](SwapAxesParams& q) { q.width = int64_t{1} << 26; }}) {
    SwapAxesParams q = roped;
    bad(q);
    EXPECT_EQ(SwapAxes(q, nullptr).code(), kInvalid);
  }
  // StreamMean.
  EXPECT_EQ(StreamMean({.x = f, .out = f, .tokens = 2, .dim = 8, .copies = 0}, nullptr).code(),
            kInvalid);
  EXPECT_EQ(StreamMean({.x = f, .out = f, .tokens = 2, .dim = 8, .copies = 4, .out_stride = 7},
                       nullptr)
                .code(),
            kInvalid);
  EXPECT_EQ(StreamMean({.x = nullptr, .out = f, .tokens = 2, .dim = 8, .copies = 4}, nullptr)
                .code(),
            kInvalid);
  EXPECT_TRUE(StreamMean({.tokens = 0, .dim = 8, .copies = 4}, nullptr).ok());
  // Nothing above reached the device.
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

}  // namespace
}  // namespace weir::kernels::cuda::decode
