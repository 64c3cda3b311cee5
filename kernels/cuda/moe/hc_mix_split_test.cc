#include "kernels/cuda/moe/hc_mix_split.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/mhc.h"
#include "kernels/cuda/moe/test_util.h"

namespace weir::kernels::cuda {
namespace {

using moe_test::BitMismatches;
using moe_test::DeviceBuffer;
using moe_test::MaxAbsError;
using moe_test::NormalVector;
using moe_test::RelativeError;
using moe_test::Synced;

// One problem on the device: inputs, outputs and the split scratch.
struct Problem {
  Problem(int64_t tokens, int n, int64_t dim, uint32_t seed)
      : tokens(tokens), n(n), dim(dim) {
    std::mt19937 rng(seed);
    const int64_t n_mix = (2 + n) * n;
    x = NormalVector(tokens * n * dim, 1.0f, rng);
    fn = NormalVector(n_mix * n * dim, 0.05f, rng);
    base = NormalVector(n_mix, 0.5f, rng);
  }
  int64_t tokens;
  int n;
  int64_t dim;
  std::vector<float> x, fn, base, scale = {0.8f, 1.2f, 2.0f};
};

struct Outputs {
  std::vector<float> pre, post, comb;
};

// HcMixSplitK over `p.x` rows [first, first + count), with a fresh scratch
// whose counters start at zero; `repeats` launches on the same scratch.
// `tf32`: HcMixTf32 instead (with `roles`, device row roles, role 1;
// `promote`: its promoted sums).
Outputs RunSplit(const Problem& p, int64_t first, int64_t count, int repeats = 1,
                 bool transposed = false, bool token_loop = false, bool tf32 = false,
                 const std::vector<int32_t>* roles = nullptr, bool promote = false,
                 int tile_rows = 1) {
  const int64_t nd = p.n * p.dim;
  const std::vector<float> rows(p.x.begin() + first * nd, p.x.begin() + (first + count) * nd);
  DeviceBuffer<float> dx(rows), dfn(p.fn), dscale(p.scale), dbase(p.base);
  DeviceBuffer<float> dpre(count * p.n), dpost(count * p.n), dcomb(count * p.n * p.n);
  DeviceBuffer<float> partials(HcMixSplitPartialFloats(count, p.n, p.dim));
  DeviceBuffer<uint32_t> counters(std::vector<uint32_t>(HcMixSplitCounters(count), 0u));
  partials.Poison();
  DeviceBuffer<int32_t> droles(roles != nullptr ? *roles : std::vector<int32_t>(1, 0));
  Outputs out;
  for (int i = 0; i < repeats; ++i) {
    dpre.Poison();
    dpost.Poison();
    dcomb.Poison();
    const HcMixParams params{.x = dx.get(),
                             .hc_fn = dfn.get(),
                             .scale = dscale.get(),
                             .base = dbase.get(),
                             .pre = dpre.get(),
                             .post = dpost.get(),
                             .comb = dcomb.get(),
                             .tokens = count,
                             .dim = p.dim,
                             .hc_mult = p.n,
                             .sinkhorn_iters = 20,
                             .hc_eps = 1e-6f,
                             .norm_eps = 1e-20f};
    const HcMixSplitScratch scratch{.partials = partials.get(), .counters = counters.get()};
    const absl::Status st =
        tf32 ? HcMixTf32(params, scratch, nullptr, roles != nullptr ? droles.get() : nullptr, 1,
                         promote, tile_rows)
             : HcMixSplitK(params, scratch, nullptr, kHcMixSplitOnYTokens, transposed, token_loop);
    EXPECT_TRUE(st.ok()) << st;
    EXPECT_TRUE(Synced());
    Outputs now{dpre.Download(), dpost.Download(), dcomb.Download()};
    if (i > 0) {  // the counters came back to zero: a replay gives the same bits
      EXPECT_EQ(BitMismatches(now.pre, out.pre), 0) << "repeat " << i;
      EXPECT_EQ(BitMismatches(now.comb, out.comb), 0) << "repeat " << i;
    }
    out = std::move(now);
  }
  const std::vector<uint32_t> left = counters.Download();
  EXPECT_TRUE(std::all_of(left.begin(), left.end(), [](uint32_t c) { return c == 0; }))
      << "counters not left at zero";
  return out;
}

// The CPU reference's coefficients of all of `p`'s tokens.
Outputs CpuCoefficients(const Problem& p) {
  const cpu::HcParams params{
      .hc_mult = p.n, .sinkhorn_iters = 20, .hc_eps = 1e-6f, .norm_eps = 1e-20f};
  Outputs want{std::vector<float>(p.tokens * p.n), std::vector<float>(p.tokens * p.n),
               std::vector<float>(p.tokens * p.n * p.n)};
  EXPECT_TRUE(cpu::HcMix(params, {.x = p.x,
                                  .hc_fn = p.fn,
                                  .scale = p.scale,
                                  .base = p.base,
                                  .pre = want.pre,
                                  .post = want.post,
                                  .comb = want.comb,
                                  .tokens = p.tokens,
                                  .dim = p.dim})
                  .ok());
  return want;
}

// The largest absolute error over pre, post and comb, and the largest
// relative one (||got - want|| / ||want|| an output).
double MaxAbsError(const Outputs& got, const Outputs& want) {
  return std::max({MaxAbsError(got.pre, want.pre), MaxAbsError(got.post, want.post),
                   MaxAbsError(got.comb, want.comb)});
}
double RelativeError(const Outputs& got, const Outputs& want) {
  return std::max({RelativeError(got.pre, want.pre), RelativeError(got.post, want.post),
                   RelativeError(got.comb, want.comb)});
}

// Against the CPU reference (products in another order, v^2 in double): the
// mixes move by ~1e-7 relative; sigmoid, softmax and Sinkhorn carry that
// smoothly (values in [0, 2]), so 1e-5 is a wide margin, as for HcMix.
TEST(HcMixSplitKTest, MatchesTheCpuReference) {
  struct Case {
    int64_t tokens;
    int n;
    int64_t dim;
  };
  for (const Case& c : {Case{1, 4, 64}, Case{7, 4, 1000}, Case{33, 1, 256}, Case{3, 4, 4096},
                        Case{9, 3, 700}, Case{5, 2, 2048}, Case{64, 4, 4096}}) {
    const Problem p(c.tokens, c.n, c.dim, static_cast<uint32_t>(c.tokens * 1000 + c.dim + c.n));
    const Outputs want = CpuCoefficients(p);
    const Outputs got = RunSplit(p, 0, c.tokens, /*repeats=*/2);
    const double err = MaxAbsError(got, want), rel = RelativeError(got, want);
    EXPECT_LT(err, 1e-5) << c.tokens << "x" << c.n << "x" << c.dim;
    EXPECT_LT(rel, 1e-5) << c.tokens << "x" << c.n << "x" << c.dim;
    std::printf("HcMixSplitK %lldx%dx%lld: max abs err %.3g, rel err %.3g\n",
                static_cast<long long>(c.tokens), c.n, static_cast<long long>(c.dim), err, rel);
  }
}

// A token's coefficients do not depend on the other tokens: each of 37
// tokens alone, and 5 tokens from an offset (another place in its group of
// four), give the bits it has in the batch of 37 (calls of up to 8 tokens run
// one token a CTA, the batch of 37 four: the group size moves no bit).
TEST(HcMixSplitKTest, BatchInvariant) {
  const Problem p(37, 4, 4096, 11);
  const Outputs all = RunSplit(p, 0, 37);
  const int64_t n = p.n;
  auto same = [&](const Outputs& part, int64_t first, int64_t count) {
    auto slice = [&](const std::vector<float>& v, int64_t width) {
      return std::vector<float>(v.begin() + first * width, v.begin() + (first + count) * width);
    };
    EXPECT_EQ(BitMismatches(part.pre, slice(all.pre, n)), 0) << first << "+" << count;
    EXPECT_EQ(BitMismatches(part.post, slice(all.post, n)), 0) << first << "+" << count;
    EXPECT_EQ(BitMismatches(part.comb, slice(all.comb, n * n)), 0) << first << "+" << count;
  };
  for (int64_t t : {0, 1, 5, 36}) same(RunSplit(p, t, 1), t, 1);
  same(RunSplit(p, 3, 5), 3, 5);
}

// Prefill-sized calls (kHcMixSplitOnYTokens tokens and more) run the grid
// with the splits on y and several groups a CTA (kHcMixGroupsPerCta): every
// token keeps the bits it has in calls of the old grid (37 tokens at a time)
// and stays within the CPU reference's bound; a partial last chunk of groups
// (301 tokens: 76 groups, 10 CTAs of 8) and a replay on the same counters.
TEST(HcMixSplitKTest, PrefillGridGivesTheSmallCallsBits) {
  const int64_t tokens = 301;
  ASSERT_GE(tokens, kHcMixSplitOnYTokens);
  const Problem p(tokens, 4, 1536, 29);  // 6 splits
  const Outputs all = RunSplit(p, 0, tokens, /*repeats=*/2);
  int64_t differ = 0;
  for (int64_t first = 0; first < tokens; first += 37) {
    const int64_t count = std::min<int64_t>(37, tokens - first);
    const Outputs part = RunSplit(p, first, count);
    auto slice = [&](const std::vector<float>& v, int64_t width) {
      return std::vector<float>(v.begin() + first * width, v.begin() + (first + count) * width);
    };
    differ += BitMismatches(part.pre, slice(all.pre, p.n)) +
              BitMismatches(part.post, slice(all.post, p.n)) +
              BitMismatches(part.comb, slice(all.comb, p.n * p.n));
  }
  EXPECT_EQ(differ, 0);
  EXPECT_LT(MaxAbsError(all, CpuCoefficients(p)), 1e-5);
}

// transposed_sums: each warp's sums with the butterfly transposed (a lane
// keeps half of its values a level) are the butterfly's sums, bit for bit:
// one token a CTA (decode sizes), four, and the prefill grid, for every
// hc_mult (25, 16, 9 and 4 values a token: odd counts at several levels).
// token_loop (from kHcMixLoopMinTokens tokens: 16 a CTA, hc_fn in
// registers, the last group partial) gives the same bits too.
TEST(HcMixSplitKTest, TransposedSumsAndTheTokenLoopGiveTheButterflysBits) {
  for (const int n : {4, 3, 2, 1}) {
    for (const int64_t tokens : {int64_t{1}, int64_t{7}, int64_t{33}, int64_t{70}, int64_t{301}}) {
      SCOPED_TRACE(::testing::Message() << "hc_mult " << n << " tokens " << tokens);
      const Problem p(tokens, n, 1536, 41 + n);
      const Outputs want = RunSplit(p, 0, tokens);
      for (const bool loop : {false, true}) {
        const Outputs got =
            RunSplit(p, 0, tokens, /*repeats=*/2, /*transposed=*/true, /*token_loop=*/loop);
        EXPECT_EQ(BitMismatches(got.pre, want.pre) + BitMismatches(got.post, want.post) +
                      BitMismatches(got.comb, want.comb),
                  0)
            << "token loop " << loop;
      }
    }
  }
}

// The prompt's TF32 form against the CPU reference: each product to about
// 2^-21 relative (the lo lo term and lo's rounding left out) and the tensor
// core's fp32 accumulation, which does not round to nearest: over a split's
// 192 accumulations a half its errors add up, so the coefficients measured
// 1.6e-5 from the CPU's at 4,096 - 5,120 dims on an H100 (thirty-ninth
// session) where HcMixSplitK's were 2.6 - 3.3e-6. Bound 3e-5 absolute
// (values in [0, 2]) and 1e-5 relative (measured 3.8e-6). Odd dims leave a
// split's halves part-filled (quads past n * dim read as zero), 1 - 3
// tokens leave m16 tiles empty, 130 tokens fill two groups and part of a third.
TEST(HcMixTf32Test, MatchesTheCpuReference) {
  struct Case {
    int64_t tokens;
    int n;
    int64_t dim;
  };
  for (const Case& c : {Case{1, 4, 64}, Case{7, 4, 1000}, Case{33, 1, 256}, Case{3, 4, 4096},
                        Case{9, 3, 700}, Case{5, 2, 2048}, Case{130, 4, 4096}, Case{64, 4, 5120}}) {
    const Problem p(c.tokens, c.n, c.dim, static_cast<uint32_t>(c.tokens * 1000 + c.dim + c.n));
    const Outputs want = CpuCoefficients(p);
    const Outputs got = RunSplit(p, 0, c.tokens, /*repeats=*/2, false, false, /*tf32=*/true);
    const Outputs split = RunSplit(p, 0, c.tokens);
    const Outputs promoted =
        RunSplit(p, 0, c.tokens, /*repeats=*/2, false, false, /*tf32=*/true, nullptr, true);
    const double promoted_err = MaxAbsError(promoted, want);
    // Promoted sums round every step's sum to nearest: HcMixSplitK's bound.
    EXPECT_LT(promoted_err, 1e-5) << c.tokens << "x" << c.n << "x" << c.dim;
    const double err = MaxAbsError(got, want), rel = RelativeError(got, want);
    const double split_err = MaxAbsError(split, want);
    EXPECT_LT(err, 3e-5) << c.tokens << "x" << c.n << "x" << c.dim;
    EXPECT_LT(rel, 1e-5) << c.tokens << "x" << c.n << "x" << c.dim;
    std::printf(
        "HcMixTf32 %lldx%dx%lld: max abs err %.3g (promoted %.3g, HcMixSplitK %.3g), rel err "
        "%.3g\n",
        static_cast<long long>(c.tokens), c.n, static_cast<long long>(c.dim), err, promoted_err,
        split_err, rel);
  }
}

// A token's TF32 coefficients are its row's alone: each of 150 tokens in
// calls of 1, of 5 from an offset (another place in its m16 tile and group),
// and of 70 from another offset give the bits it has in the call of 150;
// with the promoted sums too.
TEST(HcMixTf32Test, BatchInvariant) {
  for (const bool promote : {false, true}) {
    SCOPED_TRACE(::testing::Message() << "promote " << promote);
    const int64_t tokens = 150;
    const Problem p(tokens, 4, 2048, 13);
    const Outputs all = RunSplit(p, 0, tokens, 1, false, false, /*tf32=*/true, nullptr, promote);
    const int64_t n = p.n;
    auto same = [&](int64_t first, int64_t count) {
      const Outputs part =
          RunSplit(p, first, count, 1, false, false, /*tf32=*/true, nullptr, promote);
      auto slice = [&](const std::vector<float>& v, int64_t width) {
        return std::vector<float>(v.begin() + first * width, v.begin() + (first + count) * width);
      };
      EXPECT_EQ(BitMismatches(part.pre, slice(all.pre, n)), 0) << first << "+" << count;
      EXPECT_EQ(BitMismatches(part.post, slice(all.post, n)), 0) << first << "+" << count;
      EXPECT_EQ(BitMismatches(part.comb, slice(all.comb, n * n)), 0) << first << "+" << count;
    };
    for (int64_t t : {0, 1, 17, 63, 64, 149}) same(t, 1);
    same(3, 5);
    same(61, 70);
  }
}

// Two m16 tiles a warp (tile_rows 2: 128 tokens a CTA, hc_fn's TF32 pairs
// made once for both) give each token the bits of one tile a warp, with and
// without the promoted sums and row roles, over calls that leave tiles,
// groups and CTAs part-filled.
TEST(HcMixTf32Test, TwoTilesAWarpGiveOneTilesBits) {
  struct Case {
    int64_t tokens;
    int n;
    int64_t dim;
  };
  for (const Case& c :
       {Case{1, 4, 4096}, Case{17, 4, 1000}, Case{64, 4, 4096}, Case{65, 4, 4096},
        Case{130, 3, 700}, Case{300, 4, 2048}, Case{129, 1, 256}, Case{200, 2, 2048}}) {
    const Problem p(c.tokens, c.n, c.dim, static_cast<uint32_t>(c.tokens * 7 + c.dim));
    std::vector<int32_t> roles(c.tokens);
    for (int64_t i = 0; i < c.tokens; ++i) roles[i] = i % 5 == 0 ? 0 : 1;
    for (const bool promote : {false, true}) {
      for (const std::vector<int32_t>* r : {static_cast<const std::vector<int32_t>*>(nullptr),
                                            static_cast<const std::vector<int32_t>*>(&roles)}) {
        SCOPED_TRACE(::testing::Message() << c.tokens << "x" << c.n << "x" << c.dim << " promote "
                                          << promote << " roles " << (r != nullptr));
        const Outputs one = RunSplit(p, 0, c.tokens, 1, false, false, /*tf32=*/true, r, promote);
        const Outputs two =
            RunSplit(p, 0, c.tokens, /*repeats=*/2, false, false, /*tf32=*/true, r, promote, 2);
        EXPECT_EQ(BitMismatches(two.pre, one.pre), 0);
        EXPECT_EQ(BitMismatches(two.post, one.post), 0);
        EXPECT_EQ(BitMismatches(two.comb, one.comb), 0);
      }
    }
  }
}

// With row roles only role-1 tokens are written: the others keep the
// poison, the written ones have the bits of the call without roles.
TEST(HcMixTf32Test, RowRoleWritesOnlyItsRows) {
  const int64_t tokens = 80;
  const Problem p(tokens, 4, 1024, 17);
  std::vector<int32_t> roles(tokens);
  for (int64_t i = 0; i < tokens; ++i) roles[i] = (i % 3 == 0 || i > 70) ? 1 : 0;
  const Outputs all = RunSplit(p, 0, tokens, 1, false, false, /*tf32=*/true);
  const Outputs part = RunSplit(p, 0, tokens, /*repeats=*/2, false, false, /*tf32=*/true, &roles);
  int64_t written_differ = 0, others_written = 0;
  for (int64_t i = 0; i < tokens; ++i) {
    for (int64_t j = 0; j < p.n * p.n; ++j) {
      const float got = part.comb[i * p.n * p.n + j], want = all.comb[i * p.n * p.n + j];
      if (roles[i] == 1) {
        written_differ += std::memcmp(&got, &want, sizeof(float)) != 0;
      } else {
        others_written += !std::isnan(got);  // the poison (0xFF bytes) is a NaN
      }
    }
  }
  EXPECT_EQ(written_differ, 0);
  EXPECT_EQ(others_written, 0);
}

TEST(HcMixSplitKTest, RefusesWhatItCannotTake) {
  float* p = reinterpret_cast<float*>(256);
  uint32_t* w = reinterpret_cast<uint32_t*>(256);
  HcMixParams mix{.x = p, .hc_fn = p, .scale = p, .base = p, .pre = p, .post = p, .comb = p,
                  .tokens = 1, .dim = 8, .hc_mult = 4};
  EXPECT_TRUE(SupportsHcMixSplitK(mix));
  mix.hc_mult = 8;  // HcMix takes it; the split kernel keeps 25 values a lane
  EXPECT_FALSE(SupportsHcMixSplitK(mix));
  EXPECT_EQ(HcMixSplitK(mix, {.partials = p, .counters = w}, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  mix.hc_mult = 1;
  mix.dim = 6;  // n * dim not a multiple of 4
  EXPECT_FALSE(SupportsHcMixSplitK(mix));
  mix.dim = 8;
  mix.x = p + 1;  // misaligned
  EXPECT_FALSE(SupportsHcMixSplitK(mix));
  mix.x = p;
  mix.hc_fn = nullptr;
  EXPECT_FALSE(SupportsHcMixSplitK(mix));
  mix.hc_fn = p;
  EXPECT_EQ(HcMixSplitK(mix, {.partials = nullptr, .counters = w}, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(HcMixTf32(mix, {.partials = nullptr, .counters = w}, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  mix.hc_mult = 8;
  EXPECT_EQ(HcMixTf32(mix, {.partials = p, .counters = w}, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  mix.hc_mult = 1;
  EXPECT_EQ(HcMixSplitPartialFloats(5, 4, 4096), 5 * 16 * 25);
  EXPECT_EQ(HcMixSplitCounters(5), 5);  // one token a CTA up to 8 tokens
  EXPECT_GE(HcMixSplitCounters(37), 10);
}

}  // namespace
}  // namespace weir::kernels::cuda
