// RoundPairToBf16 against RoundToBf16 on the device (GPU machine only; tag
// gpu): the same bits on every value that is not NaN (random bit patterns,
// ties, subnormals, the largest finite values, infinities, zeros) and on the
// canonical NaN 0x7fffffff that tensor cores and fp32 multiplies return; the
// NaNs of other payloads and signs come out as the canonical bf16 NaN.
#include "kernels/cuda/round_pair_probe.h"

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/common/numeric_formats.h"
#include "kernels/cuda/device_buffer.h"

namespace weir::kernels::cuda {
namespace {

float FromBits(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}
uint32_t BitsOf(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  return bits;
}
bool IsNan(uint32_t bits) { return (bits & 0x7f800000u) == 0x7f800000u && (bits & 0x7fffffu); }

TEST(RoundPairProbeTest, PairRoundingGivesRoundToBf16sBitsOnEveryValueButNaN) {
  std::vector<uint32_t> bits;
  std::mt19937 rng(17);
  for (int i = 0; i < (1 << 20); ++i) bits.push_back(rng());  // every class, NaNs among them
  for (uint32_t low : {0x0000u, 0x0001u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu}) {
    for (uint32_t high : {0x0000u, 0x0001u, 0x0040u, 0x007fu, 0x0080u, 0x3f80u, 0x3f81u, 0x7f7fu,
                          0x7f80u, 0x8000u, 0x8001u, 0x807fu, 0xbf80u, 0xff7fu, 0xff80u}) {
      bits.push_back(high << 16 | low);  // ties both ways, subnormals, overflow, +-inf, +-0
    }
  }
  for (int i = 0; i < 4096; ++i) bits.push_back(rng() & 0x807fffffu);  // subnormals
  bits.push_back(0x7fffffffu);                                         // the canonical NaN
  bits.push_back(0x7fffffffu);
  if (bits.size() % 2 != 0) bits.push_back(0);
  std::vector<float> in(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) in[i] = FromBits(bits[i]);
  testing::DeviceBuffer<float> din(in), dscalar(in.size()), dpair(in.size());
  ASSERT_TRUE(RoundPairProbe({.in = din.get(),
                              .scalar = dscalar.get(),
                              .pair = dpair.get(),
                              .n = static_cast<int64_t>(in.size())},
                             nullptr)
                  .ok());
  const std::vector<float> scalar = dscalar.Download(), pair = dpair.Download();
  int64_t values = 0, nans = 0, nans_differing = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    const uint32_t s = BitsOf(scalar[i]), p = BitsOf(pair[i]);
    // The device's RoundToBf16 is the CPU's.
    ASSERT_EQ(s, BitsOf(kernels::RoundToBf16(in[i]))) << std::hex << bits[i];
    if (!IsNan(bits[i]) || bits[i] == 0x7fffffffu) {
      ASSERT_EQ(p, s) << std::hex << "input " << bits[i];
      ++values;
    } else {
      ++nans;
      EXPECT_TRUE(IsNan(p)) << std::hex << "input " << bits[i];
      nans_differing += p != s;
    }
  }
  std::printf(
      "RoundPairToBf16: %lld values (canonical NaN included) with RoundToBf16's bits; "
      "%lld other NaNs, %lld with other bits\n",
      static_cast<long long>(values), static_cast<long long>(nans),
      static_cast<long long>(nans_differing));
  EXPECT_GT(nans, 0);
  EXPECT_TRUE(RoundPairProbe({.n = 3}, nullptr).code() == absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace weir::kernels::cuda
