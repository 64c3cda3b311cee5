// GPU test of ReblockFp8Rows / ReblockFp8Tiles (fp8_reblock.h) and
// Fp8LtGemm (fp8_lt_gemm.h):
//  * the device re-blocking gives the CPU specification's bytes
//    (fp8_reblock_ref.h), pad rows and scale padding included;
//  * y against the exact product of the ORIGINAL (stored-form) operands,
//    within a stated bound, for both weight scale forms and both outputs at
//    V4.1-like (m, n, k);
//  * batch invariance: rows of a 4,096-row product equal the same rows
//    computed with m = 1, 37 and 1,000, bit for bit, whichever m a handle
//    saw first;
//  * a CUDA graph replay; bad arguments.
// Nothing here has run on a GPU yet: the scale layouts (fp8_reblock_ref.h)
// come from cuBLAS's documentation and PyTorch's usage, and this test is
// what confirms them.

#include "kernels/cuda/dense/fp8_lt_gemm.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/common/numeric_formats.h"
#include "kernels/cpu/weight_quant.h"
#include "kernels/cuda/dense/fp8_reblock.h"
#include "kernels/cuda/dense/fp8_reblock_ref.h"
#include "kernels/cuda/dense/test_util.h"

namespace weir::kernels::cuda::dense {
namespace {

// Stored forms: X [m, k] codes + [m, k / 32] scales; W [n, k] codes +
// [ceil(n / 32), k / 32] tile scales.
struct Stored {
  std::vector<uint8_t> codes, scales;
};

// X from cpu::QuantizeFp8 with each 32-block's magnitude 2^-12 .. 2^12, so the
// four blocks of a 128 span differ by up to 24 binades (codes fall below the
// subnormal grid).
Stored RandomX(int64_t m, int64_t k, std::mt19937& rng) {
  Stored x;
  QuantizedFp8Rows(m, k, rng, x.codes, x.scales);
  return x;
}

// W from cpu::QuantizeFp8Weight (32 x 32 tiles) with each tile's magnitude
// 2^-8 .. 2^8.
Stored RandomW(int64_t n, int64_t k, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-8, 8);
  const int64_t tile_rows = (n + 31) / 32, tile_cols = k / 32;
  std::vector<int> tile_exp(tile_rows * tile_cols);
  for (int& e : tile_exp) e = exponent(rng);
  std::vector<float> v(n * k);
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t c = 0; c < k; ++c) {
      v[r * k + c] = std::ldexp(normal(rng), tile_exp[(r / 32) * tile_cols + c / 32]);
    }
  }
  Stored w;
  w.codes.resize(n * k);
  w.scales.resize(tile_rows * tile_cols);
  EXPECT_TRUE(cpu::QuantizeFp8Weight(v, n, k, 32, w.codes, w.scales).ok());
  return w;
}

// The value of element (r, c) of a stored form (`rows_per_scale` 1: X, 32: W).
double StoredValue(const Stored& s, int64_t r, int64_t c, int64_t k, int rows_per_scale) {
  const int scale = s.scales[(r / rows_per_scale) * (k / 32) + c / 32];
  return std::ldexp(static_cast<double>(E4m3ToFloat(s.codes[r * k + c])), scale - 127);
}

// Re-blocked operands on the device.
struct DeviceOperand {
  std::unique_ptr<DeviceBuffer<uint8_t>> codes;
  std::unique_ptr<DeviceBuffer<float>> scales;
};

// ReblockFp8Rows of X (rows_per_scale 1) or W's 1x128 form (32), outputs
// poisoned first.
DeviceOperand ReblockRowsOnDevice(const Stored& s, int64_t rows, int64_t k, int rows_per_scale) {
  DeviceBuffer<uint8_t> codes(s.codes), scales(s.scales);
  DeviceOperand out{std::make_unique<DeviceBuffer<uint8_t>>(Fp8LtPaddedRows(rows) * k),
                    std::make_unique<DeviceBuffer<float>>(Fp8Vec128ScaleFloats(rows, k))};
  out.codes->Poison(0x7F);
  out.scales->Poison(0xFF);
  const absl::Status status = ReblockFp8Rows({.codes = codes.get(),
                                              .scales = scales.get(),
                                              .out_codes = out.codes->get(),
                                              .out_scales = out.scales->get(),
                                              .rows = rows,
                                              .k = k,
                                              .rows_per_scale = rows_per_scale},
                                             nullptr);
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  return out;
}

DeviceOperand ReblockTilesOnDevice(const Stored& s, int64_t n, int64_t k) {
  DeviceBuffer<uint8_t> codes(s.codes), scales(s.scales);
  DeviceOperand out{std::make_unique<DeviceBuffer<uint8_t>>(n * k),
                    std::make_unique<DeviceBuffer<float>>(Fp8Blk128ScaleFloats(n, k))};
  out.codes->Poison(0x7F);
  out.scales->Poison(0xFF);
  const absl::Status status = ReblockFp8Tiles({.codes = codes.get(),
                                               .scales = scales.get(),
                                               .out_codes = out.codes->get(),
                                               .out_scales = out.scales->get(),
                                               .n = n,
                                               .k = k},
                                              nullptr);
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  return out;
}

DeviceOperand ReblockWOnDevice(const Stored& w, int64_t n, int64_t k, Fp8LtWeightScales form) {
  return form == Fp8LtWeightScales::kVec128 ? ReblockRowsOnDevice(w, n, k, 32)
                                            : ReblockTilesOnDevice(w, n, k);
}

Fp8Reblocked ReblockWRef(const Stored& w, int64_t n, int64_t k, Fp8LtWeightScales form) {
  return form == Fp8LtWeightScales::kVec128 ? ReblockFp8RowsRef(w.codes, w.scales, n, k, 32)
                                            : ReblockFp8TilesRef(w.codes, w.scales, n, k);
}

// Counts bytes / float bit patterns that differ (device against reference).
int64_t ByteMismatches(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  int64_t d = static_cast<int64_t>(a.size() > b.size() ? a.size() - b.size() : b.size() - a.size());
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) d += a[i] != b[i];
  return d;
}
int64_t FloatBitMismatches(const std::vector<float>& a, const std::vector<float>& b) {
  int64_t d = static_cast<int64_t>(a.size() > b.size() ? a.size() - b.size() : b.size() - a.size());
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    d += std::memcmp(&a[i], &b[i], sizeof(float)) != 0;
  }
  return d;
}

const char* FormName(Fp8LtWeightScales form) {
  return form == Fp8LtWeightScales::kVec128 ? "1x128" : "128x128";
}

TEST(ReblockFp8Test, DeviceGivesTheSpecificationsBytes) {
  std::mt19937 rng(3);
  for (auto [rows, k] :
       {std::pair<int64_t, int64_t>{1, 128}, {37, 1024}, {300, 512}, {4096, 4096}}) {
    const Stored x = RandomX(rows, k, rng);
    const Fp8Reblocked want = ReblockFp8RowsRef(x.codes, x.scales, rows, k, 1);
    const DeviceOperand got = ReblockRowsOnDevice(x, rows, k, 1);
    EXPECT_EQ(ByteMismatches(got.codes->Download(), want.codes), 0) << "X rows " << rows;
    EXPECT_EQ(FloatBitMismatches(got.scales->Download(), want.scales), 0) << "X rows " << rows;
    std::printf("X %lld x %lld: %lld codes rounded by the 1x128 scale\n",
                static_cast<long long>(rows), static_cast<long long>(k),
                static_cast<long long>(want.inexact));
  }
  // W: n not a multiple of 128 (and of 32 in one case), both forms.
  for (auto [n, k] :
       {std::pair<int64_t, int64_t>{176, 640}, {512, 1024}, {1296, 512}, {1536, 4096}}) {
    const Stored w = RandomW(n, k, rng);
    for (Fp8LtWeightScales form : {Fp8LtWeightScales::kVec128, Fp8LtWeightScales::kBlk128x128}) {
      const Fp8Reblocked want = ReblockWRef(w, n, k, form);
      const DeviceOperand got = ReblockWOnDevice(w, n, k, form);
      EXPECT_EQ(ByteMismatches(got.codes->Download(), want.codes), 0)
          << FormName(form) << " n " << n;
      EXPECT_EQ(FloatBitMismatches(got.scales->Download(), want.scales), 0)
          << FormName(form) << " n " << n;
      std::printf("W %lld x %lld %s: %lld codes rounded\n", static_cast<long long>(n),
                  static_cast<long long>(k), FormName(form), static_cast<long long>(want.inexact));
    }
  }
}

// Raw random bytes (every non-NaN code, scale bytes 0..254 with spreads up to
// 40 inside a span, NaN scale 0xFF in places) and the rewrite in place.
TEST(ReblockFp8Test, RawBytesAndInPlace) {
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> byte(0, 255);
  const int64_t rows = 64, k = 512;
  Stored s;
  s.codes.resize(rows * k);
  for (uint8_t& c : s.codes) c = static_cast<uint8_t>((byte(rng) & 0x7F) == 0x7F ? 0 : byte(rng));
  s.scales.resize(rows * k / 32);
  for (uint8_t& c : s.scales) c = static_cast<uint8_t>(std::clamp(100 + byte(rng) % 41, 0, 254));
  s.scales[3] = 0;
  s.scales[9] = 0xFF;
  const Fp8Reblocked want_x = ReblockFp8RowsRef(s.codes, s.scales, rows, k, 1);
  const DeviceOperand got_x = ReblockRowsOnDevice(s, rows, k, 1);
  EXPECT_EQ(ByteMismatches(got_x.codes->Download(), want_x.codes), 0);
  EXPECT_EQ(FloatBitMismatches(got_x.scales->Download(), want_x.scales), 0);
  // In place (W tiles form: rows 64, so tile rows 2).
  const std::vector<uint8_t> tile_scales(s.scales.begin(), s.scales.begin() + 2 * k / 32);
  const Fp8Reblocked want_w = ReblockFp8TilesRef(s.codes, tile_scales, rows, k);
  DeviceBuffer<uint8_t> codes(s.codes), scales(tile_scales);
  DeviceBuffer<float> out_scales(Fp8Blk128ScaleFloats(rows, k));
  ASSERT_TRUE(ReblockFp8Tiles({.codes = codes.get(),
                               .scales = scales.get(),
                               .out_codes = codes.get(),
                               .out_scales = out_scales.get(),
                               .n = rows,
                               .k = k},
                              nullptr)
                  .ok());
  EXPECT_EQ(ByteMismatches(codes.Download(), want_w.codes), 0);
  EXPECT_EQ(FloatBitMismatches(out_scales.Download(), want_w.scales), 0);
}

// The exact sums of one output element: of the original operands, of the
// re-blocked ones, and of the re-blocked terms' magnitudes.
struct Exact {
  double original = 0, reblocked = 0, magnitude = 0;
};

// Bound on |y - original|, justified term by term:
//  * |reblocked - original|: what re-blocking changed in the operands
//    (computed, not assumed: both double sums are within k 2^-53 of their
//    sum of |terms|, far below the other terms);
//  * cuBLASLt's sums: each 128-term block sum on the FP8 tensor cores
//    within 2^-10 of that block's sum of |terms|, and the k / 128 scaled
//    block sums added in fp32 (each addition within 2^-24 of the running
//    sum of |terms|), so (2^-10 + (k / 128 + 1) 2^-24) x magnitude. The
//    first version assumed 2^-12 (Hopper's FP8 wgmma accumulation keeps
//    about 14 bits, DeepSeek-V3 report) and an H100 measured up to 2.1
//    times that (forty-fifth session: worst |y - exact| 2^-11.7 of the sum
//    of |terms| at k 1,024), so the library keeps fewer bits than that
//    between its promotions; 2^-10 leaves room for other shapes while a
//    wrong scale layout still misses by orders of magnitude;
//  * the output's rounding: 2^-24 (fp32) or 2^-8 (bf16, nearest even) of
//    |y|, bounded by |reblocked| plus the two terms above.
double Bound(const Exact& e, int64_t k, Fp8GemmOutput output) {
  const double sums = (std::ldexp(1.0, -10) + (k / 128 + 1) * std::ldexp(1.0, -24)) * e.magnitude;
  const double out_rel =
      output == Fp8GemmOutput::kBf16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -24);
  const double reblock = std::fabs(e.reblocked - e.original);
  return reblock + sums + out_rel * (std::fabs(e.reblocked) + sums) + 1e-30;
}

// y's element as a double (fp32, or bf16 bits).
double YValue(const std::vector<uint8_t>& y, int64_t i, Fp8GemmOutput output) {
  if (output == Fp8GemmOutput::kBf16) {
    uint16_t b;
    std::memcpy(&b, &y[i * 2], 2);
    return Bf16BitsToFloat(b);
  }
  float f;
  std::memcpy(&f, &y[i * 4], 4);
  return f;
}

// Runs one product on the device; returns y's bytes ([padded m, n]).
std::vector<uint8_t> RunLt(Fp8LtGemm& gemm, const DeviceOperand& x, const DeviceOperand& w,
                           Fp8LtWeightScales form, int64_t m, int64_t n, int64_t k,
                           Fp8GemmOutput output, absl::Status* status) {
  DeviceBuffer<uint8_t> y(Fp8LtPaddedRows(m) * n * Fp8GemmOutputBytes(output));
  y.Poison(0xFF);
  *status = gemm.Run({.x = x.codes->get(),
                      .x_scales = x.scales->get(),
                      .w = w.codes->get(),
                      .w_scales = w.scales->get(),
                      .w_scales_form = form,
                      .y = y.get(),
                      .m = m,
                      .n = n,
                      .k = k,
                      .output = output},
                     nullptr);
  return y.Download();
}

TEST(Fp8LtGemmTest, WithinTheBoundOfTheExactProduct) {
  absl::StatusOr<std::unique_ptr<Fp8LtGemm>> gemm = Fp8LtGemm::Create();
  ASSERT_TRUE(gemm.ok()) << gemm.status();
  std::mt19937 rng(9);
  for (auto [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{37, 512, 1024},
                         {4096, 1536, 4096},
                         {300, 4096, 512}}) {
    const Stored x = RandomX(m, k, rng), w = RandomW(n, k, rng);
    const Fp8Reblocked xr = ReblockFp8RowsRef(x.codes, x.scales, m, k, 1);
    const DeviceOperand dx = ReblockRowsOnDevice(x, m, k, 1);
    // The rows the CPU checks: all of them, or every 64th and the last for 4,096.
    std::vector<int64_t> rows;
    const int64_t step = m > 512 ? 64 : 1;
    for (int64_t r = 0; r < m; r += step) rows.push_back(r);
    if (rows.back() != m - 1) rows.push_back(m - 1);
    std::vector<double> wo(n * k);  // W's stored values
    for (int64_t j = 0; j < n; ++j) {
      for (int64_t c = 0; c < k; ++c) wo[j * k + c] = StoredValue(w, j, c, k, 32);
    }
    for (Fp8LtWeightScales form : {Fp8LtWeightScales::kVec128, Fp8LtWeightScales::kBlk128x128}) {
      const Fp8Reblocked wr = ReblockWRef(w, n, k, form);
      const DeviceOperand dw = ReblockWOnDevice(w, n, k, form);
      std::vector<double> wn(n * k);  // W's re-blocked values
      for (int64_t j = 0; j < n; ++j) {
        for (int64_t c = 0; c < k; ++c) {
          const float ws = form == Fp8LtWeightScales::kVec128
                               ? wr.scales[Fp8Vec128ScaleIndex(j, c / 128, n)]
                               : wr.scales[Fp8Blk128ScaleIndex(j / 128, c / 128, k)];
          wn[j * k + c] = static_cast<double>(E4m3ToFloat(wr.codes[j * k + c])) * ws;
        }
      }
      // Exact sums of the checked rows (shared by both outputs).
      std::vector<Exact> exact(rows.size() * n);
      for (size_t i = 0; i < rows.size(); ++i) {
        const int64_t r = rows[i];
        std::vector<double> xo(k), xn(k);
        for (int64_t c = 0; c < k; ++c) {
          xo[c] = StoredValue(x, r, c, k, 1);
          xn[c] = static_cast<double>(E4m3ToFloat(xr.codes[r * k + c])) *
                  xr.scales[Fp8Vec128ScaleIndex(r, c / 128, m)];
        }
        for (int64_t j = 0; j < n; ++j) {
          Exact& e = exact[i * n + j];
          const double* wo_row = &wo[j * k];
          const double* wn_row = &wn[j * k];
          for (int64_t c = 0; c < k; ++c) {
            e.original += xo[c] * wo_row[c];
            e.reblocked += xn[c] * wn_row[c];
            e.magnitude += std::fabs(xn[c] * wn_row[c]);
          }
        }
      }
      for (Fp8GemmOutput output : {Fp8GemmOutput::kF32, Fp8GemmOutput::kBf16}) {
        absl::Status status;
        const std::vector<uint8_t> y = RunLt(**gemm, dx, dw, form, m, n, k, output, &status);
        ASSERT_TRUE(status.ok()) << status << " m " << m << " n " << n << " k " << k;
        double worst = 0, worst_reblock_share = 0;
        int64_t over = 0;
        for (size_t i = 0; i < rows.size(); ++i) {
          for (int64_t j = 0; j < n; ++j) {
            const Exact& e = exact[i * n + j];
            const double got = YValue(y, rows[i] * n + j, output);
            const double err = std::fabs(got - e.original), bound = Bound(e, k, output);
            if (!(err <= bound)) {
              if (++over <= 5) {
                ADD_FAILURE() << FormName(form) << " out " << static_cast<int>(output) << " m " << m
                              << " n " << n << " k " << k << " y[" << rows[i] << ", " << j
                              << "] = " << got << ", exact " << e.original << " (re-blocked "
                              << e.reblocked << "), bound " << bound;
              }
            }
            worst = std::max(worst, err / bound);
            worst_reblock_share =
                std::max(worst_reblock_share, std::fabs(e.reblocked - e.original) /
                                                  (e.magnitude > 0 ? e.magnitude : 1.0));
          }
        }
        EXPECT_EQ(over, 0);
        // Pad rows of y (m .. padded m - 1) hold zeros.
        for (int64_t i = m * n; i < Fp8LtPaddedRows(m) * n; ++i) {
          EXPECT_EQ(YValue(y, i, output), 0.0) << "pad element " << i;
        }
        std::printf(
            "m %-5lld n %-5lld k %-5lld %-7s %s: worst |y - exact| / bound %.3g; worst "
            "re-blocking change / sum|terms| %.3g; X codes rounded %lld, W codes rounded %lld\n",
            static_cast<long long>(m), static_cast<long long>(n), static_cast<long long>(k),
            FormName(form), output == Fp8GemmOutput::kBf16 ? "bf16" : "f32", worst,
            worst_reblock_share, static_cast<long long>(xr.inexact),
            static_cast<long long>(wr.inexact));
      }
    }
  }
}

// Rows of a 4,096-row product against the same rows run as m = 1, 37 and
// 1,000 (at the start, the middle and the end of the 4,096), bit for bit:
// both forms, both outputs, two shapes; one handle first sees m = 4,096,
// another first sees m = 1.
TEST(Fp8LtGemmTest, ARowsBitsDoNotDependOnM) {
  absl::StatusOr<std::unique_ptr<Fp8LtGemm>> big_first = Fp8LtGemm::Create();
  absl::StatusOr<std::unique_ptr<Fp8LtGemm>> small_first = Fp8LtGemm::Create();
  ASSERT_TRUE(big_first.ok() && small_first.ok());
  std::mt19937 rng(13);
  constexpr int64_t kBig = 4096;
  for (auto [n, k] : {std::pair<int64_t, int64_t>{1536, 4096}, {4096, 512}}) {
    const Stored x = RandomX(kBig, k, rng), w = RandomW(n, k, rng);
    for (Fp8LtWeightScales form : {Fp8LtWeightScales::kVec128, Fp8LtWeightScales::kBlk128x128}) {
      const DeviceOperand dw = ReblockWOnDevice(w, n, k, form);
      for (Fp8GemmOutput output : {Fp8GemmOutput::kF32, Fp8GemmOutput::kBf16}) {
        const int64_t row_bytes = n * Fp8GemmOutputBytes(output);
        // The small handle's first call of this shape is an m = 1 product.
        const Stored x1{std::vector<uint8_t>(x.codes.begin(), x.codes.begin() + k),
                        std::vector<uint8_t>(x.scales.begin(), x.scales.begin() + k / 32)};
        absl::Status status;
        const std::vector<uint8_t> y1_first = RunLt(**small_first, ReblockRowsOnDevice(x1, 1, k, 1),
                                                    dw, form, 1, n, k, output, &status);
        ASSERT_TRUE(status.ok()) << status;
        const std::vector<uint8_t> y_big = RunLt(**big_first, ReblockRowsOnDevice(x, kBig, k, 1),
                                                 dw, form, kBig, n, k, output, &status);
        ASSERT_TRUE(status.ok()) << status;
        EXPECT_EQ(std::memcmp(y1_first.data(), y_big.data(), row_bytes), 0)
            << "row 0 alone (first call of the small handle)";
        for (int64_t m : {int64_t{1}, int64_t{37}, int64_t{1000}}) {
          for (int64_t start : {int64_t{0}, (kBig - m) / 2, kBig - m}) {
            const Stored xs{std::vector<uint8_t>(x.codes.begin() + start * k,
                                                 x.codes.begin() + (start + m) * k),
                            std::vector<uint8_t>(x.scales.begin() + start * k / 32,
                                                 x.scales.begin() + (start + m) * k / 32)};
            const DeviceOperand dx = ReblockRowsOnDevice(xs, m, k, 1);
            for (Fp8LtGemm* gemm : {big_first->get(), small_first->get()}) {
              const std::vector<uint8_t> y = RunLt(*gemm, dx, dw, form, m, n, k, output, &status);
              ASSERT_TRUE(status.ok()) << status << " m " << m;
              int64_t rows_differing = 0;
              for (int64_t r = 0; r < m; ++r) {
                rows_differing +=
                    std::memcmp(y.data() + r * row_bytes, y_big.data() + (start + r) * row_bytes,
                                row_bytes) != 0;
              }
              EXPECT_EQ(rows_differing, 0)
                  << FormName(form) << " out " << static_cast<int>(output) << " n " << n << " k "
                  << k << " m " << m << " start " << start;
            }
          }
        }
      }
    }
  }
}

TEST(Fp8LtGemmTest, ReplaysFromACudaGraph) {
  absl::StatusOr<std::unique_ptr<Fp8LtGemm>> gemm = Fp8LtGemm::Create();
  ASSERT_TRUE(gemm.ok()) << gemm.status();
  std::mt19937 rng(17);
  const int64_t m = 37, n = 512, k = 1024;
  const Stored x = RandomX(m, k, rng), w = RandomW(n, k, rng);
  const DeviceOperand dw = ReblockWOnDevice(w, n, k, Fp8LtWeightScales::kBlk128x128);
  const DeviceOperand direct_x = ReblockRowsOnDevice(x, m, k, 1);
  absl::Status status;
  const std::vector<uint8_t> want = RunLt(**gemm, direct_x, dw, Fp8LtWeightScales::kBlk128x128, m,
                                          n, k, Fp8GemmOutput::kF32, &status);
  ASSERT_TRUE(status.ok()) << status;
  // Capture the X re-blocking and the product together.
  DeviceBuffer<uint8_t> codes(x.codes), scales(x.scales), xr(Fp8LtPaddedRows(m) * k);
  DeviceBuffer<float> xrs(Fp8Vec128ScaleFloats(m, k)), y(Fp8LtPaddedRows(m) * n);
  y.Poison(0xFF);
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  cudaGraph_t graph;
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
  const absl::Status reblocked = ReblockFp8Rows({.codes = codes.get(),
                                                 .scales = scales.get(),
                                                 .out_codes = xr.get(),
                                                 .out_scales = xrs.get(),
                                                 .rows = m,
                                                 .k = k},
                                                stream);
  const absl::Status ran = (*gemm)->Run({.x = xr.get(),
                                         .x_scales = xrs.get(),
                                         .w = dw.codes->get(),
                                         .w_scales = dw.scales->get(),
                                         .y = y.get(),
                                         .m = m,
                                         .n = n,
                                         .k = k},
                                        stream);
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  ASSERT_TRUE(reblocked.ok()) << reblocked;
  ASSERT_TRUE(ran.ok()) << ran;
  cudaGraphExec_t exec;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  const std::vector<float> got = y.Download();
  EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size()), 0);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

// y_ld: a product into a column slice of a wider y (the decoder's weight
// slices) gives the bits of the same product into a y of its own, and
// leaves the other columns alone.
TEST(Fp8LtGemmTest, WritesAColumnSliceOfAWiderY) {
  absl::StatusOr<std::unique_ptr<Fp8LtGemm>> gemm = Fp8LtGemm::Create();
  ASSERT_TRUE(gemm.ok()) << gemm.status();
  std::mt19937 rng(23);
  const int64_t m = 40, n = 512, k = 1024, wide = 1536, at = 512;
  const Stored x = RandomX(m, k, rng), w = RandomW(n, k, rng);
  const DeviceOperand dw = ReblockWOnDevice(w, n, k, Fp8LtWeightScales::kVec128);
  const DeviceOperand dx = ReblockRowsOnDevice(x, m, k, 1);
  absl::Status status;
  const std::vector<uint8_t> want =
      RunLt(**gemm, dx, dw, Fp8LtWeightScales::kVec128, m, n, k, Fp8GemmOutput::kF32, &status);
  ASSERT_TRUE(status.ok()) << status;
  DeviceBuffer<float> y(m * wide);
  y.Poison(0xFF);
  const absl::Status ran = (*gemm)->Run({.x = dx.codes->get(),
                                         .x_scales = dx.scales->get(),
                                         .w = dw.codes->get(),
                                         .w_scales = dw.scales->get(),
                                         .w_scales_form = Fp8LtWeightScales::kVec128,
                                         .y = y.get() + at,
                                         .y_ld = wide,
                                         .m = m,
                                         .n = n,
                                         .k = k},
                                        nullptr);
  ASSERT_TRUE(ran.ok()) << ran;
  const std::vector<float> got = y.Download();
  const float* want_f = reinterpret_cast<const float*>(want.data());
  int64_t differing = 0, touched = 0;
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t c = 0; c < wide; ++c) {
      uint32_t bits;
      std::memcpy(&bits, &got[r * wide + c], 4);
      if (c >= at && c < at + n) {
        differing += std::memcmp(&got[r * wide + c], &want_f[r * n + c - at], 4) != 0;
      } else {
        touched += bits != 0xFFFFFFFFu;
      }
    }
  }
  EXPECT_EQ(differing, 0);
  EXPECT_EQ(touched, 0);
}

// CopyRowsOfRole: the rows of one role copied, every other byte untouched,
// for fp32 and bf16 elements and strided rows.
TEST(CopyRowsOfRoleTest, CopiesOneRolesRowsOnly) {
  std::mt19937 rng(29);
  for (const int bytes : {4, 2}) {
    const int64_t rows = 37, cols = 64, src_ld = 80, dst_ld = 96;
    std::vector<uint8_t> src(rows * src_ld * bytes);
    for (uint8_t& b : src) b = static_cast<uint8_t>(rng());
    std::vector<int32_t> roles(rows);
    for (int32_t& r : roles) r = static_cast<int32_t>(rng() % 2);
    DeviceBuffer<uint8_t> dsrc(src), dst(rows * dst_ld * bytes);
    DeviceBuffer<int32_t> droles(roles);
    dst.Poison(0xAB);
    const absl::Status s = CopyRowsOfRole({.src = dsrc.get(),
                                           .dst = dst.get(),
                                           .row_role = droles.get(),
                                           .rows = rows,
                                           .cols = cols,
                                           .src_ld = src_ld,
                                           .dst_ld = dst_ld,
                                           .elem_bytes = bytes,
                                           .role = 1},
                                          nullptr);
    ASSERT_TRUE(s.ok()) << s;
    const std::vector<uint8_t> got = dst.Download();
    int64_t wrong = 0;
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t b = 0; b < dst_ld * bytes; ++b) {
        const bool copied = roles[r] == 1 && b < cols * bytes;
        const uint8_t want = copied ? src[r * src_ld * bytes + b] : uint8_t{0xAB};
        wrong += got[r * dst_ld * bytes + b] != want;
      }
    }
    EXPECT_EQ(wrong, 0) << bytes << "-byte elements";
  }
  int32_t role = 1;
  float buf[4];
  EXPECT_EQ(CopyRowsOfRole({.src = buf,
                            .dst = buf,
                            .row_role = &role,
                            .rows = 1,
                            .cols = 3,
                            .src_ld = 4,
                            .dst_ld = 4},
                           nullptr)
                .code(),
            absl::StatusCode::kInvalidArgument);  // 12 bytes of columns
}

TEST(Fp8LtGemmTest, RefusesBadArguments) {
  EXPECT_TRUE(Fp8LtGemm::Takes(512, 1024, Fp8GemmOutput::kF32));
  EXPECT_TRUE(Fp8LtGemm::Takes(1536, 4096, Fp8GemmOutput::kBf16));
  EXPECT_FALSE(Fp8LtGemm::Takes(520, 1024, Fp8GemmOutput::kF32));
  EXPECT_FALSE(Fp8LtGemm::Takes(512, 1000, Fp8GemmOutput::kF32));
  EXPECT_FALSE(Fp8LtGemm::Takes(512, 1024, Fp8GemmOutput::kF32RoundedBf16));
  absl::StatusOr<std::unique_ptr<Fp8LtGemm>> gemm = Fp8LtGemm::Create();
  ASSERT_TRUE(gemm.ok()) << gemm.status();
  DeviceBuffer<uint8_t> buf(1 << 20);
  ASSERT_TRUE(buf.ok());
  uint8_t* d = buf.get();
  float* f = reinterpret_cast<float*>(d + (1 << 19));
  const Fp8LtGemmParams good{
      .x = d, .x_scales = f, .w = d, .w_scales = f, .y = d, .m = 4, .n = 32, .k = 128};
  using P = Fp8LtGemmParams;
  const auto code = [&](const P& p) { return (*gemm)->Run(p, nullptr).code(); };
  EXPECT_TRUE(
      EachIsInvalidArgument(good, code,
                            {
                                [](P& p) { p.x = nullptr; },
                                [](P& p) { p.x_scales = nullptr; },
                                [](P& p) { p.w = nullptr; },
                                [](P& p) { p.w_scales = nullptr; },
                                [](P& p) { p.y = nullptr; },
                                [](P& p) { p.m = 0; },
                                [](P& p) { p.n = 40; },
                                [](P& p) { p.n = 0; },
                                [](P& p) { p.k = 160; },
                                [](P& p) { p.k = 0; },
                                [](P& p) { p.output = Fp8GemmOutput::kF32RoundedBf16; },
                                [](P& p) { p.w_scales_form = static_cast<Fp8LtWeightScales>(7); },
                                [](P& p) { p.x += 1; },
                                [](P& p) { p.w += 8; },
                                [](P& p) { p.x_scales += 1; },
                                [](P& p) { p.y = static_cast<uint8_t*>(p.y) + 4; },
                            }));
  const ReblockFp8RowsParams rows{
      .codes = d, .scales = d, .out_codes = d, .out_scales = f, .rows = 4, .k = 128};
  EXPECT_TRUE(ReblockFp8Rows(rows, nullptr).ok());
  using R = ReblockFp8RowsParams;
  EXPECT_TRUE(EachIsInvalidArgument(rows,
                                    [](const R& p) { return ReblockFp8Rows(p, nullptr).code(); },
                                    {
                                        [](R& p) { p.codes = nullptr; },
                                        [](R& p) { p.scales = nullptr; },
                                        [](R& p) { p.out_codes = nullptr; },
                                        [](R& p) { p.out_scales = nullptr; },
                                        [](R& p) { p.rows = 0; },
                                        [](R& p) { p.k = 96; },
                                        [](R& p) { p.k = 128 * 65536; },
                                        [](R& p) { p.rows_per_scale = 16; },
                                        [](R& p) { p.codes += 1; },
                                        [](R& p) { p.out_codes += 8; },
                                        [](R& p) { p.out_scales += 1; },
                                    }));
  const ReblockFp8TilesParams tiles{
      .codes = d, .scales = d, .out_codes = d, .out_scales = f, .n = 32, .k = 128};
  EXPECT_TRUE(ReblockFp8Tiles(tiles, nullptr).ok());
  using T = ReblockFp8TilesParams;
  EXPECT_TRUE(EachIsInvalidArgument(tiles,
                                    [](const T& p) { return ReblockFp8Tiles(p, nullptr).code(); },
                                    {
                                        [](T& p) { p.codes = nullptr; },
                                        [](T& p) { p.scales = nullptr; },
                                        [](T& p) { p.out_codes = nullptr; },
                                        [](T& p) { p.out_scales = nullptr; },
                                        [](T& p) { p.n = 0; },
                                        [](T& p) { p.k = 0; },
                                        [](T& p) { p.codes += 1; },
                                        [](T& p) { p.out_codes += 4; },
                                        [](T& p) { p.out_scales += 2; },
                                    }));
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

}  // namespace
}  // namespace weir::kernels::cuda::dense
