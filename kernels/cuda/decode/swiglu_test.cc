#include "kernels/cuda/decode/swiglu.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <iterator>
#include <limits>
#include <random>
#include <span>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/common/fmath.h"
#include "kernels/common/numeric_formats.h"
#include "kernels/cpu/quant.h"
#include "kernels/cpu/swiglu.h"
#include "kernels/cuda/decode/test_util.h"

namespace weir::kernels::cuda::decode {
namespace {

using testing::DeviceBuffer;
using testing::SameBits;

// worker/model/expert_ffn.cc SwigluExpertForward's activation: the shared
// kernels/cpu SwigluRows with fmath::ExpF, between the bf16 roundings
// (ops.RoundBf16 in bf16 mode = RoundToBf16 on every element), over gate/up
// already computed. Built with -ffp-contract=off, like the model code on
// x86-64 (no FMA), so each operation rounds once.
std::vector<float> CpuSwiglu(std::vector<float> gate, std::vector<float> up,
                             std::span<const float> route_weight, int64_t rows, int64_t inter,
                             float swiglu_limit, bool bf16) {
  if (bf16) {
    for (float& v : gate) v = kernels::RoundToBf16(v);
    for (float& v : up) v = kernels::RoundToBf16(v);
  }
  kernels::cpu::SwigluRows(gate, up, route_weight, rows, inter, swiglu_limit,
                           [](float v) { return kernels::fmath::ExpF(v); });
  if (bf16) {
    for (float& v : gate) v = kernels::RoundToBf16(v);
  }
  return gate;
}

// Gate/up values: normal with a wide spread (past the clamp limits and into
// exp's overflow / underflow), plus the special values.
std::vector<float> Activations(int64_t n, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 6.0f);
  std::uniform_int_distribution<int> pick(0, 199);
  const float inf = std::numeric_limits<float>::infinity();
  const float special[] = {inf, -inf, std::numeric_limits<float>::quiet_NaN(), 0.0f, -0.0f,
                           -150.0f, 150.0f, 1e-40f, -88.5f, 89.5f};
  std::vector<float> v(n);
  for (float& x : v) {
    const int p = pick(rng);
    x = p < 10 ? special[p] : normal(rng);
  }
  return v;
}

TEST(SwigluTest, IsBitIdenticalToTheExpertFfnLoop) {
  struct Shape {
    int64_t rows, inter;
  };
  int checked = 0;
  for (const Shape& s : {Shape{1, 2048}, Shape{7, 129}, Shape{64, 256}, Shape{3, 1}}) {
    for (float limit : {0.0f, 7.0f, 10.0f, -1.0f}) {
      for (bool with_weight : {false, true}) {
        for (bool bf16 : {false, true}) {
          std::mt19937 rng(static_cast<uint32_t>(s.rows * 1000 + s.inter + limit * 7 +
                                                 with_weight * 3 + bf16));
          const std::vector<float> gate = Activations(s.rows * s.inter, rng);
          const std::vector<float> up = Activations(s.rows * s.inter, rng);
          std::vector<float> weight;
          if (with_weight) {
            std::uniform_real_distribution<float> w(0.0f, 1.0f);
            for (int64_t r = 0; r < s.rows; ++r) weight.push_back(w(rng));
          }
          const std::vector<float> want =
              CpuSwiglu(gate, up, weight, s.rows, s.inter, limit, bf16);
          DeviceBuffer<float> d_gate(gate), d_up(up), d_weight(weight), d_out(gate.size());
          d_out.Poison();
          SwigluParams p{.gate = d_gate.get(),
                         .up = d_up.get(),
                         .route_weight = with_weight ? d_weight.get() : nullptr,
                         .out = d_out.get(),
                         .rows = s.rows,
                         .inter = s.inter,
                         .limit = limit,
                         .round_bf16 = bf16};
          ASSERT_TRUE(Swiglu(p, nullptr).ok());
          // Same operations, same exp, same rounding: identical bits (NaN
          // payloads aside, see SameBits).
          EXPECT_TRUE(SameBits(d_out.Download(), want, /*nan_matches_nan=*/true))
              << s.rows << "x" << s.inter << " limit " << limit << " weight " << with_weight
              << " bf16 " << bf16;
          // In place over gate (as the CPU loop writes gate).
          p.out = d_gate.get();
          ASSERT_TRUE(Swiglu(p, nullptr).ok());
          EXPECT_TRUE(SameBits(d_gate.Download(), want, true))
              << "in place " << s.rows << "x" << s.inter;
          if (s.inter % 32 == 0) {
            // With the FP8 form in the same launch: the CPU's act_quant of
            // the output (QuantizeFp8 per 32), with and without out.
            const int64_t n = s.rows * s.inter;
            std::vector<uint8_t> want_codes(n), want_scales(n / 32);
            ASSERT_TRUE(kernels::cpu::QuantizeFp8(want, 32, want_codes, want_scales).ok());
            DeviceBuffer<float> d_gate2(gate), d_out2(n);
            DeviceBuffer<uint8_t> d_codes(n), d_scales(n / 32);
            for (const bool with_out : {true, false}) {
              d_out2.Poison();
              d_codes.Poison();
              d_scales.Poison();
              p.gate = d_gate2.get();
              p.out = with_out ? d_out2.get() : nullptr;
              p.codes = d_codes.get();
              p.scales = d_scales.get();
              ASSERT_TRUE(Swiglu(p, nullptr).ok());
              EXPECT_EQ(d_codes.Download(), want_codes)
                  << "FP8 codes " << s.rows << "x" << s.inter << " out " << with_out;
              EXPECT_EQ(d_scales.Download(), want_scales)
                  << "FP8 scales " << s.rows << "x" << s.inter << " out " << with_out;
              if (with_out) {
                EXPECT_TRUE(SameBits(d_out2.Download(), want, true)) << "out beside the FP8 form";
              }
            }
            // gate 4 bytes past a 16-byte boundary: the kernel's scalar
            // loads instead of its 16-byte ones, the same bits.
            std::vector<float> shifted(n + 1, 0.0f);
            std::copy(gate.begin(), gate.end(), shifted.begin() + 1);
            DeviceBuffer<float> d_shifted(shifted);
            d_out2.Poison();
            d_codes.Poison();
            p.gate = d_shifted.get() + 1;
            p.out = d_out2.get();
            ASSERT_TRUE(Swiglu(p, nullptr).ok());
            EXPECT_EQ(d_codes.Download(), want_codes) << "unaligned gate " << s.rows;
            EXPECT_TRUE(SameBits(d_out2.Download(), want, true)) << "unaligned gate";
            p.codes = p.scales = nullptr;
          }
          ++checked;
        }
      }
    }
  }
  EXPECT_EQ(checked, 4 * 4 * 2 * 2);
}

// With row_count (a device count read in the launch), the rows before it get
// the bits of the whole launch and the rows at and past it stay untouched, in
// both kernels (with and without the FP8 form); counts clamp to [0, rows].
TEST(SwigluTest, RowCountLeavesTheRowsPastItUntouched) {
  constexpr int64_t kRows = 29, kInter = 256;
  std::mt19937 rng(99);
  const std::vector<float> gate = Activations(kRows * kInter, rng);
  const std::vector<float> up = Activations(kRows * kInter, rng);
  std::vector<float> weight;
  std::uniform_real_distribution<float> w(0.0f, 1.0f);
  for (int64_t r = 0; r < kRows; ++r) weight.push_back(w(rng));
  const std::vector<float> want = CpuSwiglu(gate, up, weight, kRows, kInter, 7.0f, true);
  const int64_t n = kRows * kInter;
  std::vector<uint8_t> want_codes(n), want_scales(n / 32);
  ASSERT_TRUE(kernels::cpu::QuantizeFp8(want, 32, want_codes, want_scales).ok());
  DeviceBuffer<float> d_gate(gate), d_up(up), d_weight(weight), d_out(n);
  DeviceBuffer<uint8_t> d_codes(n), d_scales(n / 32);
  DeviceBuffer<int64_t> d_count(1);
  ASSERT_TRUE(d_count.ok());
  for (const bool fp8 : {false, true}) {
    for (const int64_t used :
         {int64_t{0}, int64_t{1}, int64_t{17}, kRows, kRows + 4, int64_t{-1}}) {
      const int64_t kept = std::clamp<int64_t>(used, 0, kRows);
      cudaMemcpy(d_count.get(), &used, sizeof(used), cudaMemcpyHostToDevice);
      d_out.Poison();
      d_codes.Poison();
      d_scales.Poison();
      const SwigluParams p{.gate = d_gate.get(),
                           .up = d_up.get(),
                           .route_weight = d_weight.get(),
                           .out = d_out.get(),
                           .rows = kRows,
                           .inter = kInter,
                           .limit = 7.0f,
                           .round_bf16 = true,
                           .codes = fp8 ? d_codes.get() : nullptr,
                           .scales = fp8 ? d_scales.get() : nullptr,
                           .row_count = d_count.get()};
      ASSERT_TRUE(Swiglu(p, nullptr).ok());
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      const std::vector<float> out = d_out.Download();
      constexpr uint32_t kPoisonBits = 0xFFFFFFFFu;  // Poison()'s default byte, 0xFF
      EXPECT_TRUE(SameBits(std::vector<float>(out.begin(), out.begin() + kept * kInter),
                           std::vector<float>(want.begin(), want.begin() + kept * kInter), true))
          << "fp8 " << fp8 << " row_count " << used;
      int64_t touched = 0;
      for (int64_t i = kept * kInter; i < n; ++i) {
        uint32_t bits;
        std::memcpy(&bits, &out[i], 4);
        touched += bits != kPoisonBits;
      }
      EXPECT_EQ(touched, 0) << "fp8 " << fp8 << " row_count " << used;
      if (fp8) {
        const std::vector<uint8_t> codes = d_codes.Download(), scales = d_scales.Download();
        int64_t wrong = 0, touched_codes = 0;
        for (int64_t i = 0; i < n; ++i) {
          if (i < kept * kInter) {
            wrong += codes[i] != want_codes[i];
          } else {
            touched_codes += codes[i] != 0xFF;
          }
        }
        for (int64_t i = 0; i < n / 32; ++i) {
          if (i < kept * kInter / 32) {
            wrong += scales[i] != want_scales[i];
          } else {
            touched_codes += scales[i] != 0xFF;
          }
        }
        EXPECT_EQ(wrong, 0) << "row_count " << used;
        EXPECT_EQ(touched_codes, 0) << "row_count " << used;
      }
    }
  }
}

// gate_bf16 / up_bf16: the bf16 bits of gate and up (as a product's bf16
// output rounds its fp32 sums) give the FP8 form the fp32 inputs give with
// round_bf16, byte for byte, the specials included; with row_count the rows
// at and past it stay untouched.
TEST(SwigluTest, Bf16InputsGiveTheFp32InputsFp8Form) {
  constexpr int64_t kRows = 37, kInter = 320;
  constexpr int64_t n = kRows * kInter;
  std::mt19937 rng(2024);
  const std::vector<float> gate = Activations(n, rng);
  const std::vector<float> up = Activations(n, rng);
  std::vector<float> weight;
  std::uniform_real_distribution<float> w(0.0f, 1.0f);
  for (int64_t r = 0; r < kRows; ++r) weight.push_back(w(rng));
  auto bits_of = [](const std::vector<float>& v) {
    std::vector<uint16_t> bits(v.size());
    for (size_t i = 0; i < v.size(); ++i) {
      const float r = kernels::RoundToBf16(v[i]);
      uint32_t u;
      std::memcpy(&u, &r, 4);
      bits[i] = static_cast<uint16_t>(u >> 16);
    }
    return bits;
  };
  DeviceBuffer<float> d_gate(gate), d_up(up), d_weight(weight);
  DeviceBuffer<uint16_t> d_gate16(bits_of(gate)), d_up16(bits_of(up));
  DeviceBuffer<uint8_t> want_codes(n), want_scales(n / 32), codes(n), scales(n / 32);
  DeviceBuffer<int64_t> d_count(1);
  ASSERT_TRUE(d_count.ok());
  for (const float limit : {0.0f, 7.0f}) {
    for (const int64_t used : {int64_t{-2}, int64_t{0}, int64_t{17}, kRows}) {
      const int64_t kept = std::clamp<int64_t>(used, 0, kRows);
      cudaMemcpy(d_count.get(), &used, sizeof(used), cudaMemcpyHostToDevice);
      want_codes.Poison();
      want_scales.Poison();
      codes.Poison();
      scales.Poison();
      SwigluParams p{.gate = d_gate.get(),
                     .up = d_up.get(),
                     .route_weight = d_weight.get(),
                     .rows = kRows,
                     .inter = kInter,
                     .limit = limit,
                     .round_bf16 = true,
                     .codes = want_codes.get(),
                     .scales = want_scales.get(),
                     .row_count = used == kRows ? nullptr : d_count.get()};
      ASSERT_TRUE(Swiglu(p, nullptr).ok());
      p.gate = p.up = nullptr;
      p.gate_bf16 = d_gate16.get();
      p.up_bf16 = d_up16.get();
      p.codes = codes.get();
      p.scales = scales.get();
      ASSERT_TRUE(SupportsSwiglu(p));
      ASSERT_TRUE(Swiglu(p, nullptr).ok());
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      const std::vector<uint8_t> c = codes.Download(), s = scales.Download();
      const std::vector<uint8_t> wc = want_codes.Download(), ws = want_scales.Download();
      EXPECT_TRUE(c == wc) << "limit " << limit << " row_count " << used;
      EXPECT_TRUE(s == ws) << "limit " << limit << " row_count " << used;
      int64_t written = 0, touched = 0;
      for (int64_t i = 0; i < n; ++i) (i < kept * kInter ? written : touched) += c[i] != 0xFF;
      // Every kept code written (a quantizer never writes 0xFF: finite codes
      // saturate at 0x7E / 0xFE, a nonfinite block is 0x7F).
      EXPECT_EQ(written, kept * kInter) << "row_count " << used;
      EXPECT_EQ(touched, 0) << "row_count " << used;
    }
  }
  // Refused: one of the pair, beside gate, with out, without the rounding or
  // the FP8 form, misaligned.
  uint16_t* const h = reinterpret_cast<uint16_t*>(256);
  float* const f = reinterpret_cast<float*>(256);
  uint8_t* const c = reinterpret_cast<uint8_t*>(256);
  const SwigluParams ok{.rows = 1,
                        .inter = 64,
                        .round_bf16 = true,
                        .codes = c,
                        .scales = c,
                        .gate_bf16 = h,
                        .up_bf16 = h};
  EXPECT_TRUE(SupportsSwiglu(ok));
  const std::function<void(SwigluParams&)> breaks[] = {
      [](SwigluParams& p) { p.up_bf16 = nullptr; },
      [&](SwigluParams& p) { p.gate = f; },
      [&](SwigluParams& p) { p.out = f; },
      [](SwigluParams& p) { p.round_bf16 = false; },
      [](SwigluParams& p) { p.codes = p.scales = nullptr; },
      [&](SwigluParams& p) { p.gate_bf16 = h + 4; },
  };
  for (size_t i = 0; i < std::size(breaks); ++i) {
    SwigluParams bad = ok;
    breaks[i](bad);
    EXPECT_FALSE(SupportsSwiglu(bad)) << "case " << i;
    EXPECT_EQ(Swiglu(bad, nullptr).code(), absl::StatusCode::kInvalidArgument) << "case " << i;
  }
}

TEST(SwigluTest, RefusesBadParamsAndSkipsEmptyWork) {
  float* p = reinterpret_cast<float*>(256);
  constexpr auto kInvalid = absl::StatusCode::kInvalidArgument;
  EXPECT_EQ(Swiglu({.gate = p, .up = p, .out = p, .rows = -1, .inter = 4}, nullptr).code(),
            kInvalid);
  EXPECT_EQ(Swiglu({.gate = p, .up = p, .out = p, .rows = 1, .inter = -4}, nullptr).code(),
            kInvalid);
  EXPECT_EQ(Swiglu({.gate = nullptr, .up = p, .out = p, .rows = 1, .inter = 4}, nullptr).code(),
            kInvalid);
  EXPECT_EQ(Swiglu({.gate = p, .up = nullptr, .out = p, .rows = 1, .inter = 4}, nullptr).code(),
            kInvalid);
  EXPECT_EQ(Swiglu({.gate = p, .up = p, .out = nullptr, .rows = 1, .inter = 4}, nullptr).code(),
            kInvalid);
  uint8_t* const c = reinterpret_cast<uint8_t*>(256);
  EXPECT_TRUE(
      SupportsSwiglu({.gate = p, .up = p, .rows = 1, .inter = 64, .codes = c, .scales = c}));
  EXPECT_EQ(Swiglu({.gate = p, .up = p, .out = p, .rows = 1, .inter = 48, .codes = c, .scales = c},
                   nullptr)
                .code(),
            kInvalid);  // the FP8 form needs inter % 32 == 0
  EXPECT_EQ(
      Swiglu({.gate = p, .up = p, .out = p, .rows = 1, .inter = 64, .codes = c}, nullptr).code(),
      kInvalid);  // codes without scales
  EXPECT_EQ(
      Swiglu({.gate = p, .up = p, .rows = 1, .inter = 64, .codes = c + 4, .scales = c}, nullptr)
          .code(),
      kInvalid);  // codes not 8-byte aligned
  EXPECT_TRUE(Swiglu({.rows = 0, .inter = 4}, nullptr).ok());
  EXPECT_TRUE(Swiglu({.rows = 4, .inter = 0}, nullptr).ok());
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // nothing above reached the device
}

}  // namespace
}  // namespace weir::kernels::cuda::decode
