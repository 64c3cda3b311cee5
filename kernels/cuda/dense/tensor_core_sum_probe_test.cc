// Whether Hopper's f16 wgmma sums a K block with the bits of the mma.sync f16
// pair that Fp8BlockGemm and the MXFP4 kernels run (tensor_core_sum_probe.h).
#include "kernels/cuda/dense/tensor_core_sum_probe.h"

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

Counts ProbeSums(int64_t tiles, bool narrow, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> w(tiles * kProbeRows * kProbeK), x(tiles * kProbeCols * kProbeK);
  for (uint8_t& c : w) c = RandomCode(rng, narrow);
  for (uint8_t& c : x) c = RandomCode(rng, narrow);
  DeviceBuffer<uint8_t> dw(w), dx(x);
  const size_t outputs = tiles * kProbeRows * kProbeCols;
  DeviceBuffer<float> mma(outputs), f16(outputs), e4m3(outputs);
  mma.Poison();
  f16.Poison();
  e4m3.Poison();
  const absl::Status st = TensorCoreSumProbe({.tiles = tiles,
                                              .w = dw.get(),
                                              .x = dx.get(),
                                              .mma = mma.get(),
                                              .wgmma_f16 = f16.get(),
                                              .wgmma_e4m3 = e4m3.get()});
  EXPECT_TRUE(st.ok()) << st;
  const std::vector<float> hm = mma.Download(), hf = f16.Download(), he = e4m3.Download();
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

TEST(TensorCoreSumProbeTest, RefusesBadArguments) {
  EXPECT_EQ(TensorCoreSumProbe({}).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace weir::kernels::cuda::dense
