// Whether Hopper's f16 wgmma sums a K block with the bits of the mma.sync f16
// pair that Fp8BlockGemm and the MXFP4 kernels run (tensor_core_sum_probe.h),
// and what the e4m3 wgmma's lost bits do to whole dot products.
#include "kernels/cuda/dense/tensor_core_sum_probe.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/common/numeric_formats.h"
#include "kernels/cuda/device_buffer.h"

namespace weir::kernels::cuda::dense {
namespace {

using ::weir::kernels::cuda::testing::DeviceBuffer;

uint32_t Bits(float v) {
  uint32_t b;
  std::memcpy(&b, &v, 4);
  return b;
}

// A random e4m3 code other than NaN: any (the full exponent range: products
// from 2^-18 to 2^17) or, with `narrow`, exponents within 2 of 1.0 (products of
// one magnitude with random signs, so the block sum cancels).
uint8_t RandomCode(std::mt19937& rng, bool narrow) {
  for (;;) {
    const uint8_t c = static_cast<uint8_t>(rng() & 0xFF);
    if ((c & 0x7F) == 0x7F) continue;
    if (narrow) {
      const int e = (c >> 3) & 0xF;
      if (e < 5 || e > 9) continue;
    }
    return c;
  }
}

struct Counts {
  int64_t outputs = 0, f16_differ = 0, e4m3_differ = 0;
  double f16_worst = 0, e4m3_worst = 0, mma_worst = 0;  // |sum - exact| / sum |products|
};

// The probe's sums of `tiles` tiles of codes w and x, on the host.
struct ProbeOut {
  std::vector<float> mma, f16, e4m3, e4m3_neg_a;
};

ProbeOut RunProbe(int64_t tiles, const std::vector<uint8_t>& w, const std::vector<uint8_t>& x) {
  DeviceBuffer<uint8_t> dw(w), dx(x);
  const size_t outputs = tiles * kProbeRows * kProbeCols;
  DeviceBuffer<float> mma(outputs), f16(outputs), e4m3(outputs), neg_a(outputs);
  mma.Poison();
  f16.Poison();
  e4m3.Poison();
  neg_a.Poison();
  const absl::Status st = TensorCoreSumProbe({.tiles = tiles,
                                              .w = dw.get(),
                                              .x = dx.get(),
                                              .mma = mma.get(),
                                              .wgmma_f16 = f16.get(),
                                              .wgmma_e4m3 = e4m3.get(),
                                              .wgmma_e4m3_neg_a = neg_a.get()});
  EXPECT_TRUE(st.ok()) << st;
  return {mma.Download(), f16.Download(), e4m3.Download(), neg_a.Download()};
}

Counts ProbeSums(int64_t tiles, bool narrow, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> w(tiles * kProbeRows * kProbeK), x(tiles * kProbeCols * kProbeK);
  for (uint8_t& c : w) c = RandomCode(rng, narrow);
  for (uint8_t& c : x) c = RandomCode(rng, narrow);
  const ProbeOut out = RunProbe(tiles, w, x);
  const std::vector<float>&hm = out.mma, &hf = out.f16, &he = out.e4m3;
  Counts c;
  for (int64_t t = 0; t < tiles; ++t) {
    for (int r = 0; r < kProbeRows; ++r) {
      for (int col = 0; col < kProbeCols; ++col) {
        double exact = 0, mag = 0;
        for (int k = 0; k < kProbeK; ++k) {
          const double p = static_cast<double>(E4m3ToFloat(w[(t * kProbeRows + r) * kProbeK + k])) *
                           E4m3ToFloat(x[(t * kProbeCols + col) * kProbeK + k]);
          exact += p;
          mag += std::fabs(p);
        }
        const size_t at = (t * kProbeRows + r) * kProbeCols + col;
        ++c.outputs;
        c.f16_differ += Bits(hf[at]) != Bits(hm[at]);
        c.e4m3_differ += Bits(he[at]) != Bits(hm[at]);
        if (mag > 0) {
          c.mma_worst = std::max(c.mma_worst, std::fabs(hm[at] - exact) / mag);
          c.f16_worst = std::max(c.f16_worst, std::fabs(hf[at] - exact) / mag);
          c.e4m3_worst = std::max(c.e4m3_worst, std::fabs(he[at] - exact) / mag);
        }
      }
    }
  }
  std::printf(
      "%s codes, %lld block sums: f16 wgmma differs from the mma pair in %lld, e4m3 wgmma in "
      "%lld; worst |sum - exact| / sum|p|: mma %.3g, f16 wgmma %.3g, e4m3 wgmma %.3g\n",
      narrow ? "narrow" : "full-range", static_cast<long long>(c.outputs),
      static_cast<long long>(c.f16_differ), static_cast<long long>(c.e4m3_differ), c.mma_worst,
      c.f16_worst, c.e4m3_worst);
  return c;
}

TEST(TensorCoreSumProbeTest, F16WgmmaGivesTheMmaPairsBits) {
  for (const bool narrow : {false, true}) {
    const Counts c = ProbeSums(8192, narrow, narrow ? 7u : 3u);
    ASSERT_EQ(c.outputs, 8192 * kProbeRows * kProbeCols);
    EXPECT_EQ(c.f16_differ, 0);
    // The mma pair keeps about fp32 precision (1 + 2^-18 survives).
    EXPECT_LE(c.mma_worst, 1e-6);
    // The e4m3 form keeps fewer bits: the comparison sees a difference where
    // there is one (and wrong fragments or descriptors would differ wholesale).
    EXPECT_GT(c.e4m3_differ, 0);
    EXPECT_LT(c.e4m3_differ, c.outputs);
  }
}

// What the e4m3 wgmma's lost bits do to a whole dot product, and whether a
// second sum over the negated weights cancels them. Each (row, column) of a
// tile is one 32-element K block; the same (row, column) over kDotBlocks
// consecutive tiles is one dot product of K = 32 x kDotBlocks, summed in
// double from the block sums as a kernel's fp32 promotion would (the scales
// are 1 here). Weights are either e2m1 values (the MXFP4 experts' codes in
// e4m3) or an act_quant'ed normal sample, X an act_quant'ed normal sample
// (spec/model-v41.md's FP8 rule: the block's amax to 448). Three block sums:
// the mma pair (about fp32), e4m3 wgmma, and the paired estimate
// (S(W) - S(-W)) / 2. If the e4m3 sum truncates toward zero, S(-W) = -S(W)
// and the pair gives S(W) again; if it truncates toward minus infinity the
// two errors point the same way and the pair's difference cancels their
// mean.
constexpr int kDotBlocks = 128;  // K = 4,096, V4.1's hidden size

struct DotStats {
  double bias = 0;            // mean (block sum - exact) / mean sum|p|
  double pair_bias = 0;       // the same for the paired estimate
  double mirrored = 0;        // share of block sums with S(-W) == -S(W)
  double imm_equal = 0;       // share where imm-scale-a = -1 gives S(-W)'s bits
  double dot_median[3] = {};  // median |dot - exact| / |exact|: mma, e4m3, pair
  double dot_p90[3] = {};
};

// An act_quant'ed block of 32 normal values: the scale puts the amax at 448
// (a power of two: 2^ceil(log2(amax / 448))).
void QuantizeBlock(std::mt19937& rng, uint8_t* out) {
  std::normal_distribution<float> n(0.0f, 1.0f);
  float v[kProbeK], amax = 1e-4f;
  for (float& x : v) {
    x = n(rng);
    amax = std::max(amax, std::fabs(x));
  }
  const float scale = std::exp2(std::ceil(std::log2(amax / 448.0f)));
  for (int k = 0; k < kProbeK; ++k) out[k] = FloatToE4m3(v[k] / scale);
}

DotStats ProbeDots(int64_t tiles, bool e2m1_weights, uint32_t seed) {
  DotStats s;
  std::mt19937 rng(seed);
  std::vector<uint8_t> w(tiles * kProbeRows * kProbeK), x(tiles * kProbeCols * kProbeK);
  for (int64_t b = 0; b < tiles * kProbeRows; ++b) {
    if (e2m1_weights) {
      // e2m1 magnitudes by a rounded normal's frequency (as a quantized weight
      // block's codes fall), each the e4m3 code of its value.
      std::normal_distribution<float> n(0.0f, 2.0f);
      for (int k = 0; k < kProbeK; ++k) {
        w[b * kProbeK + k] = FloatToE4m3(E2m1ToFloat(FloatToE2m1(n(rng))));
      }
    } else {
      QuantizeBlock(rng, &w[b * kProbeK]);
    }
  }
  for (int64_t b = 0; b < tiles * kProbeCols; ++b) QuantizeBlock(rng, &x[b * kProbeK]);
  std::vector<uint8_t> wn(w);
  for (uint8_t& c : wn) c ^= 0x80;  // -W: the sign bit (zero stays a zero)
  const size_t outputs = tiles * kProbeRows * kProbeCols;
  const ProbeOut pos = RunProbe(tiles, w, x), neg = RunProbe(tiles, wn, x);
  const std::vector<float>&mma = pos.mma, &e4m3 = pos.e4m3, &e4m3_neg = neg.e4m3;
  // Whether imm-scale-a = -1 sums as the negated codes do (then the pair costs
  // one more wgmma and no operand change).
  int64_t imm_equal = 0;
  for (size_t i = 0; i < outputs; ++i) imm_equal += Bits(pos.e4m3_neg_a[i]) == Bits(e4m3_neg[i]);
  s.imm_equal = static_cast<double>(imm_equal) / outputs;
  double err_sum = 0, pair_err_sum = 0, mag_sum = 0;
  int64_t mirrored = 0;
  std::vector<double> rel[3];
  for (int64_t t0 = 0; t0 + kDotBlocks <= tiles; t0 += kDotBlocks) {
    for (int r = 0; r < kProbeRows; ++r) {
      for (int col = 0; col < kProbeCols; ++col) {
        double exact_dot = 0, dot[3] = {0, 0, 0};
        for (int64_t t = t0; t < t0 + kDotBlocks; ++t) {
          double exact = 0, mag = 0;
          for (int k = 0; k < kProbeK; ++k) {
            const double p =
                static_cast<double>(E4m3ToFloat(w[(t * kProbeRows + r) * kProbeK + k])) *
                E4m3ToFloat(x[(t * kProbeCols + col) * kProbeK + k]);
            exact += p;
            mag += std::fabs(p);
          }
          const size_t at = (t * kProbeRows + r) * kProbeCols + col;
          const double pair = (static_cast<double>(e4m3[at]) - e4m3_neg[at]) / 2;
          err_sum += e4m3[at] - exact;
          pair_err_sum += pair - exact;
          mag_sum += mag;
          mirrored += Bits(e4m3_neg[at]) == (Bits(e4m3[at]) ^ 0x80000000u);
          exact_dot += exact;
          dot[0] += mma[at];
          dot[1] += e4m3[at];
          dot[2] += pair;
        }
        if (exact_dot != 0) {
          for (int i = 0; i < 3; ++i)
            rel[i].push_back(std::fabs(dot[i] - exact_dot) / std::fabs(exact_dot));
        }
      }
    }
  }
  const double blocks = static_cast<double>(outputs);
  s.bias = err_sum / mag_sum;
  s.pair_bias = pair_err_sum / mag_sum;
  s.mirrored = mirrored / blocks;
  for (int i = 0; i < 3; ++i) {
    std::sort(rel[i].begin(), rel[i].end());
    if (!rel[i].empty()) {
      s.dot_median[i] = rel[i][rel[i].size() / 2];
      s.dot_p90[i] = rel[i][rel[i].size() * 9 / 10];
    }
  }
  std::printf(
      "%s weights x act_quant'ed X, %lld dots of K %d: e4m3 wgmma bias %.3g of sum|p| (paired "
      "%.3g), S(-W) == -S(W) in %.4f of block sums, imm-scale-a -1 gives S(-W)'s bits in %.4f; "
      "|dot - exact| / |exact| median / p90: mma %.3g / %.3g, e4m3 %.3g / %.3g, paired %.3g / "
      "%.3g\n",
      e2m1_weights ? "e2m1" : "e4m3", static_cast<long long>(rel[0].size()), kDotBlocks * kProbeK,
      s.bias, s.pair_bias, s.mirrored, s.imm_equal, s.dot_median[0], s.dot_p90[0], s.dot_median[1],
      s.dot_p90[1], s.dot_median[2], s.dot_p90[2]);
  return s;
}

// The measurement behind the e4m3 wgmma options' defaults (their fidelity on
// trained weights: kernels/cuda/moe/README.md "wgmma block sums"): printed,
// and held to bounds a broken probe or a wrong dot misses.
TEST(TensorCoreSumProbeTest, E4m3WgmmaDotErrorAndItsNegatedPair) {
  for (const bool e2m1 : {true, false}) {
    const DotStats s = ProbeDots(kDotBlocks * 16, e2m1, e2m1 ? 11u : 13u);
    EXPECT_LE(s.dot_median[0], 1e-5);  // the mma pair: fp32 sums
    EXPECT_GT(s.dot_median[1], 0.0);   // e4m3 wgmma loses bits
    EXPECT_LT(s.dot_median[1], 0.1);
    EXPECT_LT(s.dot_median[2], 0.1);
    // Measured on an H100 (2026-12-05): imm-scale-a = -1 gives the negated
    // codes' bits in every block, and the negated codes' sum is the negated
    // sum in 99.99 % of blocks (the alignment truncates toward zero).
    EXPECT_GT(s.imm_equal, 0.99);
    EXPECT_GT(s.mirrored, 0.99);
  }
}

TEST(TensorCoreSumProbeTest, RefusesBadArguments) {
  EXPECT_EQ(TensorCoreSumProbe({}).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace weir::kernels::cuda::dense
