#include "kernels/cuda/dense/fake_quant.h"

#include <cuda_runtime.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/quant.h"

namespace weir::kernels::cuda::dense {
namespace {

// The CPU reference of `format` (worker/model/cpu_ops.cc FakeQuant).
absl::Status CpuFakeQuant(std::vector<float>& x, FakeQuantFormat format) {
  switch (format) {
    case FakeQuantFormat::kFp8:
      return cpu::FakeQuantFp8(x, cpu::kFp8Block);
    case FakeQuantFormat::kMxfp4:
      return cpu::FakeQuantFp4(x, cpu::kMxfp4Block, cpu::Fp4Scale::kE8m0);
    case FakeQuantFormat::kNvfp4Kv:
      return cpu::FakeQuantFp4(x, cpu::kKvFp4Block, cpu::Fp4Scale::kE4m3);
  }
  return absl::InternalError("format");
}

const char* Name(FakeQuantFormat format) {
  switch (format) {
    case FakeQuantFormat::kFp8:
      return "fp8";
    case FakeQuantFormat::kMxfp4:
      return "mxfp4";
    case FakeQuantFormat::kNvfp4Kv:
      return "nvfp4kv";
  }
  return "?";
}

// Random blocks, each with its own magnitude (2^-140 .. 2^100, so the amax
// floors, fp32 subnormals and huge scales are all hit), plus hand-made blocks:
// all zero, NaN, +-Inf, saturation, signed zeros and exact e2m1 midpoints.
std::vector<float> MakeInput(int64_t n, int block, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-140, 100);
  std::vector<float> x(n);
  for (int64_t b = 0; b < n / block; ++b) {
    const float scale = std::ldexp(1.0f, exponent(rng));
    for (int i = 0; i < block; ++i) x[b * block + i] = normal(rng) * scale;
  }
  const int64_t blocks = n / block;
  auto at = [&](int64_t b, int i) -> float& { return x[(b % blocks) * block + i]; };
  for (int i = 0; i < block; ++i) at(0, i) = 0.0f;
  at(1, 3) = std::numeric_limits<float>::quiet_NaN();
  at(2, block - 1) = std::numeric_limits<float>::infinity();
  at(3, 0) = -std::numeric_limits<float>::infinity();
  for (int i = 0; i < block; ++i) at(4, i) = i % 2 ? 448.0f * 1e20f : -3.0e38f;
  for (int i = 0; i < block; ++i) at(5, i) = i % 2 ? -0.0f : 0.0f;
  at(5, 1) = 1e-42f;  // fp32 subnormal
  // amax 6 (scale 1 for E8M0): the elements sit on e2m1 midpoints and values.
  const float points[] = {6.0f, 0.25f, -0.75f, 1.25f, -1.75f, 2.5f, 3.5f, -5.0f,
                          0.5f, 4.0f,  -0.0f,  5.5f,  0.1f,   1.0f, 3.0f, -6.0f};
  for (int i = 0; i < block; ++i) at(6, i) = points[i % 16];
  for (int i = 0; i < block; ++i) at(7, i) = points[i % 16] * 0x1p-20f;
  return x;
}

// Bitwise equality, except that any NaN matches any NaN.
bool SameBits(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b);
}

TEST(FakeQuantCudaTest, BitIdenticalToTheCpuReference) {
  for (FakeQuantFormat format :
       {FakeQuantFormat::kFp8, FakeQuantFormat::kMxfp4, FakeQuantFormat::kNvfp4Kv}) {
    const int block = FakeQuantBlock(format);
    // One block; an odd number of blocks (partial last warp / thread block);
    // a large buffer.
    for (int64_t n : {int64_t{block}, int64_t{block} * 37, int64_t{1} << 20}) {
      std::vector<float> x = MakeInput(n, block, static_cast<uint32_t>(n) * 3 + block);
      std::vector<float> want = x;
      ASSERT_TRUE(CpuFakeQuant(want, format).ok());

      float *dx, *dout;
      ASSERT_EQ(cudaMalloc(&dx, n * 4), cudaSuccess);
      ASSERT_EQ(cudaMalloc(&dout, n * 4), cudaSuccess);
      ASSERT_EQ(cudaMemcpy(dx, x.data(), n * 4, cudaMemcpyHostToDevice), cudaSuccess);
      ASSERT_EQ(cudaMemset(dout, 0x7F, n * 4), cudaSuccess);  // Poison.
      // Out of place, then in place.
      ASSERT_TRUE(FakeQuant({.x = dx, .out = dout, .n = n, .format = format}, nullptr).ok());
      ASSERT_TRUE(FakeQuant({.x = dx, .out = dx, .n = n, .format = format}, nullptr).ok());
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      std::vector<float> got(n), got_in_place(n);
      cudaMemcpy(got.data(), dout, n * 4, cudaMemcpyDeviceToHost);
      cudaMemcpy(got_in_place.data(), dx, n * 4, cudaMemcpyDeviceToHost);
      cudaFree(dx);
      cudaFree(dout);

      int64_t mismatches = 0, first = -1;
      for (int64_t i = 0; i < n; ++i) {
        if (!SameBits(got[i], want[i]) || !SameBits(got_in_place[i], want[i])) {
          if (first < 0) first = i;
          ++mismatches;
        }
      }
      EXPECT_EQ(mismatches, 0) << Name(format) << " n=" << n << " first at " << first
                               << ": x=" << (first >= 0 ? x[first] : 0.0f)
                               << " gpu=" << (first >= 0 ? got[first] : 0.0f)
                               << " cpu=" << (first >= 0 ? want[first] : 0.0f);
      // The hand-made blocks did what they are for.
      const int64_t blocks = n / block;
      if (blocks > 3) {
        EXPECT_TRUE(std::isnan(got[1 * block])) << Name(format);
        EXPECT_TRUE(std::isnan(got[3 * block + 1])) << Name(format);
        EXPECT_EQ(got[0], 0.0f);
      }
      std::printf("%-8s n=%-8lld bit-identical elements: %lld / %lld\n", Name(format),
                  static_cast<long long>(n), static_cast<long long>(n - mismatches),
                  static_cast<long long>(n));
    }
  }
}

// The stored forms: the compressed KV (QuantizeNvfp4Kv: block 16, E4M3
// scales) and MXFP4 activations (QuantizeMxfp4: block 32, E8M0 scales) are
// the CPU's QuantizeFp4 byte for byte on every finite block; a block with a
// NaN or an infinity gets the format's NaN scale (its dequantized values are
// NaN, as FakeQuant's).
struct StoredFp4Case {
  const char* name;
  int block;
  cpu::Fp4Scale scale;
  uint8_t nan_scale;
};

TEST(FakeQuantCudaTest, StoredFp4IsTheCpuEncoding) {
  for (const StoredFp4Case& f : {StoredFp4Case{"nvfp4kv", 16, cpu::Fp4Scale::kE4m3, 0x7F},
                                 StoredFp4Case{"mxfp4", 32, cpu::Fp4Scale::kE8m0, 0xFF}}) {
    const int blk = f.block;
    for (int64_t n : {int64_t{blk}, int64_t{blk} * 37, int64_t{1} << 20}) {
      const std::vector<float> x = MakeInput(n, blk, static_cast<uint32_t>(n) + 5);
      std::vector<uint8_t> codes(n / 2), scales(n / blk);
      ASSERT_TRUE(cpu::QuantizeFp4(x, blk, f.scale, codes, scales).ok());
      float* dx;
      uint8_t *dc, *ds;
      ASSERT_EQ(cudaMalloc(&dx, n * 4), cudaSuccess);
      ASSERT_EQ(cudaMalloc(&dc, n / 2), cudaSuccess);
      ASSERT_EQ(cudaMalloc(&ds, n / blk), cudaSuccess);
      ASSERT_EQ(cudaMemcpy(dx, x.data(), n * 4, cudaMemcpyHostToDevice), cudaSuccess);
      ASSERT_EQ(cudaMemset(dc, 0xAB, n / 2), cudaSuccess);
      const absl::Status st =
          blk == 16 ? QuantizeNvfp4Kv({.x = dx, .codes = dc, .scales = ds, .n = n}, nullptr)
                    : QuantizeMxfp4({.x = dx, .codes = dc, .scales = ds, .n = n}, nullptr);
      ASSERT_TRUE(st.ok()) << st;
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      std::vector<uint8_t> got_codes(n / 2), got_scales(n / blk);
      cudaMemcpy(got_codes.data(), dc, n / 2, cudaMemcpyDeviceToHost);
      cudaMemcpy(got_scales.data(), ds, n / blk, cudaMemcpyDeviceToHost);
      cudaFree(dx);
      cudaFree(dc);
      cudaFree(ds);
      // The device's fake quantization of the same input: the stored form
      // decodes to it (NaN blocks aside).
      std::vector<float> fake = x;
      ASSERT_TRUE(
          CpuFakeQuant(fake, blk == 16 ? FakeQuantFormat::kNvfp4Kv : FakeQuantFormat::kMxfp4).ok());
      std::vector<float> decoded(n);
      ASSERT_TRUE(cpu::DequantizeFp4(got_codes, got_scales, blk, f.scale, decoded).ok());
      int64_t differing = 0, nonfinite_blocks = 0, value_differing = 0;
      for (int64_t b = 0; b < n / blk; ++b) {
        bool finite = true;
        for (int i = 0; i < blk; ++i) finite = finite && std::isfinite(x[b * blk + i]);
        if (!finite) {
          ++nonfinite_blocks;
          EXPECT_EQ(got_scales[b], f.nan_scale) << f.name << " block " << b;
          continue;
        }
        differing += got_scales[b] != scales[b];
        for (int i = 0; i < blk / 2; ++i) {
          differing += got_codes[b * blk / 2 + i] != codes[b * blk / 2 + i];
        }
        for (int i = 0; i < blk; ++i) {
          value_differing += !SameBits(decoded[b * blk + i], fake[b * blk + i]);
        }
      }
      EXPECT_EQ(differing, 0) << f.name << " n " << n;
      EXPECT_EQ(value_differing, 0) << f.name << " n " << n;
      if (n > blk * 4) {
        EXPECT_GE(nonfinite_blocks, 3) << f.name;
      }
    }
  }
  EXPECT_EQ(QuantizeNvfp4Kv({.x = nullptr, .n = 16}, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(QuantizeMxfp4({.x = nullptr, .n = 32}, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  auto* p = reinterpret_cast<float*>(256);
  auto* b = reinterpret_cast<uint8_t*>(256);
  // 48 is a multiple of NVFP4's 16, not of MXFP4's 32.
  EXPECT_EQ(QuantizeMxfp4({.x = p, .codes = b, .scales = b, .n = 48}, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(FakeQuantCudaTest, RefusesBadArguments) {
  auto* p = reinterpret_cast<float*>(256);
  EXPECT_EQ(FakeQuant({.x = p, .out = p, .n = 48, .format = FakeQuantFormat::kFp8}, nullptr)
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(FakeQuant({.x = p, .out = p, .n = 24, .format = FakeQuantFormat::kNvfp4Kv}, nullptr)
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(FakeQuant({.x = p, .out = p, .n = 0, .format = FakeQuantFormat::kMxfp4}, nullptr)
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(FakeQuant({.x = nullptr, .out = p, .n = 32, .format = FakeQuantFormat::kMxfp4},
                      nullptr)
                .code(),
            absl::StatusCode::kInvalidArgument);
  // 48 is fine for the 16-blocks of NVFP4 KV.
  EXPECT_TRUE(SupportsFakeQuant({.x = p, .out = p, .n = 48, .format = FakeQuantFormat::kNvfp4Kv}));
}

}  // namespace
}  // namespace weir::kernels::cuda::dense
