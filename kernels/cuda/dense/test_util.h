// kernels/cuda/dense/test_util.h
//
// Test helpers of the FP8 GEMM tests here and in kernels/cuda/moe: an owning
// device buffer filled from and read back to host vectors, error measures,
// random FP8 rows, a sweep of bad arguments, and host emulations of the PTX
// ldmatrix / mma.m16n8k32 fragments (for the CPU params tests).
//
// Thread safety: DeviceBuffer is not thread-safe; functions are pure (except
// that QuantizedFp8Rows advances `rng`).

#ifndef WEIR_KERNELS_CUDA_DENSE_TEST_UTIL_H_
#define WEIR_KERNELS_CUDA_DENSE_TEST_UTIL_H_

#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <random>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "kernels/common/numeric_formats.h"
#include "kernels/cpu/quant.h"
#include "kernels/cuda/dense/fp8_block_gemm_params.h"
#include "kernels/cuda/device_buffer.h"

namespace weir::kernels::cuda::dense {

// Every tile of the mma.sync GEMMs (Fp8BlockGemm, Bf16Gemm): the tests run
// each and compare bits.
inline constexpr Fp8GemmTile kAllFp8GemmTiles[] = {
    Fp8GemmTile::kN16M8,  Fp8GemmTile::kN16M16,  Fp8GemmTile::kN16M32,   Fp8GemmTile::kN16M64,
    Fp8GemmTile::kN32M8,  Fp8GemmTile::kN32M16,  Fp8GemmTile::kN32M32,   Fp8GemmTile::kN32M64,
    Fp8GemmTile::kN64M64, Fp8GemmTile::kN128M64, Fp8GemmTile::kN128M128, Fp8GemmTile::kN64M8,
    Fp8GemmTile::kN64M16, Fp8GemmTile::kN64M32,  Fp8GemmTile::kN64M8S4,  Fp8GemmTile::kN64M8S3};

using ::weir::kernels::cuda::testing::DeviceBuffer;

// Random bf16 rows [rows, k] whose magnitudes differ by row (2^-6 .. 2^6).
inline std::vector<uint16_t> RandomBf16Rows(int64_t rows, int64_t k, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-6, 6);
  std::vector<uint16_t> v(rows * k);
  for (int64_t r = 0; r < rows; ++r) {
    const float s = std::ldexp(1.0f, exponent(rng));
    for (int64_t c = 0; c < k; ++c) v[r * k + c] = kernels::FloatToBf16Bits(normal(rng) * s);
  }
  return v;
}

// `n` values drawn from N(0, stddev^2) with `rng`.
inline std::vector<float> NormalValues(int64_t n, std::mt19937& rng, float stddev) {
  std::normal_distribution<float> normal(0.0f, stddev);
  std::vector<float> v(n);
  for (float& f : v) f = normal(rng);
  return v;
}

// The same with a generator seeded with `seed`.
inline std::vector<float> NormalValues(int64_t n, uint32_t seed, float stddev) {
  std::mt19937 rng(seed);
  return NormalValues(n, rng, stddev);
}

// Returns ||a - b|| / ||b|| (0 when both are zero).
inline double RelativeError(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    const double d = static_cast<double>(a[i]) - b[i];
    num += d * d;
    den += static_cast<double>(b[i]) * b[i];
  }
  return den == 0 ? std::sqrt(num) : std::sqrt(num / den);
}

// Returns the number of positions whose float bits differ (a NaN matches any
// NaN), and the first such index in *first (-1 if none; `first` may be null);
// a size difference counts as that many mismatches.
inline int64_t BitMismatches(const std::vector<float>& a, const std::vector<float>& b,
                             int64_t* first = nullptr) {
  int64_t count = 0;
  int64_t ignored = -1;
  if (first == nullptr) first = &ignored;
  *first = -1;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    uint32_t ua, ub;
    std::memcpy(&ua, &a[i], 4);
    std::memcpy(&ub, &b[i], 4);
    const bool same = (std::isnan(a[i]) && std::isnan(b[i])) || ua == ub;
    if (!same) {
      if (*first < 0) *first = static_cast<int64_t>(i);
      ++count;
    }
  }
  return count + static_cast<int64_t>(a.size() > b.size() ? a.size() - b.size()
                                                            : b.size() - a.size());
}

// Fills `codes` [rows, k] and `scales` [rows, k / 32] with cpu::QuantizeFp8
// (32-blocks) of normal values whose 32-blocks each have their own magnitude
// 2^e, e uniform in [min_exp, max_exp]. Fails the current test if the
// quantizer refuses.
// REQUIRES: k % 32 == 0.
inline void QuantizedFp8Rows(int64_t rows, int64_t k, std::mt19937& rng,
                             std::vector<uint8_t>& codes, std::vector<uint8_t>& scales,
                             int min_exp = -12, int max_exp = 12) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(min_exp, max_exp);
  std::vector<float> v(rows * k);
  for (int64_t b = 0; b < rows * k / 32; ++b) {
    const float s = std::ldexp(1.0f, exponent(rng));
    for (int i = 0; i < 32; ++i) v[b * 32 + i] = normal(rng) * s;
  }
  codes.resize(rows * k);
  scales.resize(rows * k / 32);
  ASSERT_TRUE(cpu::QuantizeFp8(v, 32, codes, scales).ok());
}

// Applies each of `mutations` to its own copy of `good` and returns success
// when `code(copy)` is INVALID_ARGUMENT for every one; otherwise a failure
// naming the mutations (0-based, in order) that got another code.
//
//   EXPECT_TRUE(EachIsInvalidArgument(good, code, {
//       [](Params& p) { p.x = nullptr; },
//       [](Params& p) { p.k = 40; },
//   }));
template <typename Params, typename Code>
::testing::AssertionResult EachIsInvalidArgument(
    const Params& good, Code code,
    std::initializer_list<std::function<void(std::type_identity_t<Params>&)>> mutations) {
  ::testing::AssertionResult result = ::testing::AssertionSuccess();
  int index = 0;
  for (const auto& mutate : mutations) {
    Params p = good;
    mutate(p);
    if (const absl::StatusCode got = code(p); got != absl::StatusCode::kInvalidArgument) {
      if (result) result = ::testing::AssertionFailure();
      result << "mutation " << index << " got " << absl::StatusCodeToString(got) << "; ";
    }
    ++index;
  }
  return result;
}

// ---- Host emulation of one warp's FP8 tensor-core fragments (PTX ISA) -----

// ldmatrix.m8n8.x{2,4}.b16: lane L supplies the address of row L % 8 of
// matrix L / 8; register q of lane L receives bytes [4 (L % 4), 4 (L % 4) + 4)
// of row L / 4 of matrix q. Returns `lane`'s registers 0..matrices-1 (the
// rest 0); `address` [32] holds byte offsets into `smem`.
inline std::array<uint32_t, 4> EmulatedLdMatrix(const std::vector<uint8_t>& smem,
                                                const std::array<int, 32>& address, int lane,
                                                int matrices) {
  std::array<uint32_t, 4> regs{};
  for (int q = 0; q < matrices; ++q) {
    std::memcpy(&regs[q], &smem[address[q * 8 + lane / 4] + 4 * (lane % 4)], 4);
  }
  return regs;
}

// mma.m16n8k32 with 8-bit A (row) and B (col), PTX ISA "Matrix Fragments for
// mma.m16n8k32": groupID = lane >> 2, threadID_in_group (tig) = lane % 4;
// A element a_i (i = 0..15, register i / 4, byte i % 4):
//   row = groupID (+8 for i in 4..7 and 12..15), col = 4 tig + (i & 3) (+16 for i >= 8);
// B element b_i (i = 0..7, register i / 4, byte i % 4): row (k) = 4 tig + (i & 3)
//   (+16 for i >= 4), col = groupID;
// D element c_i (i = 0..3): row = groupID (+8 for i >= 2), col = 2 tig + (i & 1).
// `value(uint8_t code)` gives an element's value as T (the integer itself
// for tests about positions, the decoded e4m3 in double for tests about
// values). Returns D [32 lanes][4].
template <typename T, typename Value>
std::array<std::array<T, 4>, 32> EmulatedMmaM16n8k32(
    const std::array<std::array<uint32_t, 4>, 32>& a,
    const std::array<std::array<uint32_t, 2>, 32>& b, Value value) {
  T A[16][32] = {}, B[32][8] = {};
  const auto element = [](uint32_t reg, int byte) { return static_cast<uint8_t>(reg >> (8 * byte)); };
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane >> 2, t = lane & 3;
    for (int i = 0; i < 16; ++i) {
      const int row = g + (((i >> 2) & 1) ? 8 : 0), col = 4 * t + (i & 3) + (i >= 8 ? 16 : 0);
      A[row][col] = value(element(a[lane][i / 4], i % 4));
    }
    for (int i = 0; i < 8; ++i) {
      B[4 * t + (i & 3) + (i >= 4 ? 16 : 0)][g] = value(element(b[lane][i / 4], i % 4));
    }
  }
  std::array<std::array<T, 4>, 32> d{};
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane >> 2, t = lane & 3;
    for (int i = 0; i < 4; ++i) {
      const int row = g + (i >= 2 ? 8 : 0), col = 2 * t + (i & 1);
      for (int k = 0; k < 32; ++k) d[lane][i] += A[row][k] * B[k][col];
    }
  }
  return d;
}

}  // namespace weir::kernels::cuda::dense

#endif  // WEIR_KERNELS_CUDA_DENSE_TEST_UTIL_H_
