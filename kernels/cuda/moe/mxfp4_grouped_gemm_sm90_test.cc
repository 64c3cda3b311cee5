// GPU test of the grouped MXFP4 expert GEMMs: against the exact (double)
// product of the dequantized operands within the stated bound, bit-identity
// across tiles, with Fp8BlockGemm on the e4m3 form of the weights and across
// batch compositions, the fused SwiGLU + FP8 epilogue bit for bit against its
// host arithmetic, the whole expert FFN against kernels/cpu, missing weights,
// graph replays under changing device offsets, bad arguments, and empty
// experts reading no weights. Both block-sum maths (Mxfp4GemmMath) run the
// bound, tile, gate/up and batch cases, hence the length (835 lines): the
// cases share their fixtures.

#include "kernels/cuda/moe/mxfp4_grouped_gemm_sm90.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <span>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/common/fmath.h"
#include "kernels/common/numeric_formats.h"
#include "kernels/cpu/moe_expert.h"
#include "kernels/cpu/quant.h"
#include "kernels/cpu/weight_quant.h"
#include "kernels/cuda/dense/fp8_block_gemm_sm90.h"
#include "kernels/cuda/dense/test_util.h"
#include "kernels/cuda/moe/test_util.h"
#include "kernels/cuda/moe/weight_test_util.h"

namespace weir::kernels::cuda {
namespace {

using dense::QuantizedFp8Rows;
using moe_test::BitMismatches;
using moe_test::DeviceBuffer;
using moe_test::Synced;

// Every tile runs the plain product; gate/up needs 4 warps a CTA.
const auto& kPlainTiles = kMxfp4GroupedTiles;
constexpr Mxfp4GroupedTile kGatedTiles[] = {Mxfp4GroupedTile::kW4M8,    Mxfp4GroupedTile::kW4M8S4,
                                            Mxfp4GroupedTile::kW4M8S3,  Mxfp4GroupedTile::kW4M16S4,
                                            Mxfp4GroupedTile::kW4M16S3, Mxfp4GroupedTile::kW4M32,
                                            Mxfp4GroupedTile::kW8M64,   Mxfp4GroupedTile::kW8M128};

// One expert's weight in stored MXFP4 form.
struct Mxfp4 {
  int64_t n = 0, k = 0;
  std::vector<uint8_t> codes;   // [n, k / 2]
  std::vector<uint8_t> scales;  // [n, k / 32]
};

enum class Source {
  kRaw,         // any code, scales 2^-9 .. 2^6 (every row and block its own)
  kQuantized,   // cpu::QuantizeMxfp4Weight of normal values, rows/blocks of own magnitude
  kGroupScale,  // raw codes, one scale per 32 rows and 32 of K (Fp8BlockGemm's tiles)
};

Mxfp4 MakeMxfp4(int64_t n, int64_t k, std::mt19937& rng, Source source) {
  Mxfp4 w{n, k, std::vector<uint8_t>(n * k / 2), std::vector<uint8_t>(n * k / 32)};
  std::uniform_int_distribution<int> byte(0, 255), scale(118, 133);
  if (source == Source::kQuantized) {
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::uniform_int_distribution<int> exponent(-8, 4);
    std::vector<float> v(n * k);
    for (int64_t b = 0; b < n * k / 32; ++b) {
      const float s = std::ldexp(1.0f, exponent(rng));
      for (int i = 0; i < 32; ++i) v[b * 32 + i] = normal(rng) * s;
    }
    EXPECT_TRUE(cpu::QuantizeMxfp4Weight(v, n, k, w.codes, w.scales).ok());
    return w;
  }
  for (auto& c : w.codes) c = static_cast<uint8_t>(byte(rng));
  if (source == Source::kRaw) {
    for (auto& s : w.scales) s = static_cast<uint8_t>(scale(rng));
  } else {
    const int64_t kb = k / 32;
    std::vector<uint8_t> group((n + 31) / 32 * kb);
    for (auto& s : group) s = static_cast<uint8_t>(scale(rng));
    for (int64_t r = 0; r < n; ++r) {
      for (int64_t b = 0; b < kb; ++b) w.scales[r * kb + b] = group[r / 32 * kb + b];
    }
  }
  return w;
}

std::vector<int64_t> Offsets(const std::vector<int64_t>& counts) {
  std::vector<int64_t> o = {0};
  for (int64_t c : counts) o.push_back(o.back() + c);
  return o;
}

// The experts' weights on the device and the pointer arrays the kernels take.
// `replace` swaps the pointers of chosen experts (null, misaligned, bogus).
struct DeviceWeights {
  std::vector<std::unique_ptr<DeviceBuffer<uint8_t>>> owned;
  std::unique_ptr<DeviceBuffer<const uint8_t*>> codes, scales;

  explicit DeviceWeights(const std::vector<Mxfp4>& ws,
                         const std::vector<std::pair<int, const uint8_t*>>& replace = {}) {
    std::vector<const uint8_t*> c, s;
    for (const Mxfp4& w : ws) {
      owned.push_back(std::make_unique<DeviceBuffer<uint8_t>>(w.codes));
      c.push_back(owned.back()->get());
      owned.push_back(std::make_unique<DeviceBuffer<uint8_t>>(w.scales));
      s.push_back(owned.back()->get());
    }
    for (auto [e, p] : replace) c[e] = p;
    codes = std::make_unique<DeviceBuffer<const uint8_t*>>(c);
    scales = std::make_unique<DeviceBuffer<const uint8_t*>>(s);
  }
};

// Exact y and sum |x w| (double) of every grouped row against its expert.
void Exact(const std::vector<uint8_t>& x, const std::vector<uint8_t>& xs,
           const std::vector<int64_t>& offsets, const std::vector<Mxfp4>& ws, int64_t n, int64_t k,
           std::vector<double>& y, std::vector<double>& abs_sum) {
  const int64_t rows = offsets.back();
  std::vector<float> xd(rows * k);
  ASSERT_TRUE(
      cpu::DequantizeFp8(std::span(x).first(rows * k), std::span(xs).first(rows * k / 32), 32, xd)
          .ok());
  y.assign(rows * n, 0.0);
  abs_sum.assign(rows * n, 0.0);
  std::vector<float> wd(n * k);
  for (size_t e = 0; e + 1 < offsets.size(); ++e) {
    if (offsets[e + 1] == offsets[e]) continue;
    ASSERT_TRUE(cpu::DequantizeMxfp4Weight(ws[e].codes, ws[e].scales, n, k, wd).ok());
    for (int64_t r = offsets[e]; r < offsets[e + 1]; ++r) {
      for (int64_t c = 0; c < n; ++c) {
        double s = 0, a = 0;
        for (int64_t i = 0; i < k; ++i) {
          const double p = static_cast<double>(xd[r * k + i]) * wd[c * k + i];
          s += p;
          a += std::fabs(p);
        }
        y[r * n + c] = s;
        abs_sum[r * n + c] = a;
      }
    }
  }
}

// Runs Mxfp4GroupedGemm over `rows` rows (>= offsets.back(); the rest must
// stay poisoned) with NaN-poisoned y; returns y.
std::vector<float> RunGemm(const std::vector<uint8_t>& x, const std::vector<uint8_t>& xs,
                           const std::vector<int64_t>& offsets, const DeviceWeights& w, int64_t n,
                           int64_t k, int64_t rows, Mxfp4GroupedTile tile, bool round_bf16 = false,
                           Mxfp4GemmMath math = Mxfp4GemmMath::kMmaF16) {
  DeviceBuffer<uint8_t> dx(x), dxs(xs);
  DeviceBuffer<int64_t> doff(offsets);
  DeviceBuffer<float> y(rows * n);
  y.Poison();
  const absl::Status s = Mxfp4GroupedGemm({.x = dx.get(),
                                           .x_scales = dxs.get(),
                                           .expert_offsets = doff.get(),
                                           .w = w.codes->get(),
                                           .w_scales = w.scales->get(),
                                           .y = y.get(),
                                           .rows = rows,
                                           .n = n,
                                           .k = k,
                                           .num_experts = static_cast<int>(offsets.size()) - 1,
                                           .round_bf16 = round_bf16,
                                           .tile = tile,
                                           .math = math},
                                          nullptr);
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_TRUE(Synced());
  return y.Download();
}

// Error allowed, relative to sum |x w|: Fp8BlockGemm's bound (the block sums
// are the same tensor-core sums; the fold adds one 2^-24 rounding per block).
double Bound(int64_t k) { return 1e-5 + static_cast<double>(k / 32) * std::ldexp(1.0, -24); }

// ... and for kWgmma: FP8 wgmma keeps fewer bits in a block's sum (about 14,
// DeepSeek-V3 report), so each block may be off by a few 2^-14 of its sum
// |x w|: 2^-11 of the total allowed (a wrong fragment or descriptor is off by
// O(1); the test prints the worst seen).
double Bound(int64_t k, Mxfp4GemmMath math) {
  return math == Mxfp4GemmMath::kWgmma ? std::ldexp(1.0, -11) + Bound(k) : Bound(k);
}

// kMmaF16 first: MatchesTheExactProductWithinTheBoundOnEveryTile compares
// kWgmmaF16 with its bits.
constexpr Mxfp4GemmMath kMaths[] = {Mxfp4GemmMath::kMmaF16, Mxfp4GemmMath::kWgmma,
                                    Mxfp4GemmMath::kWgmmaF16};
const char* MathName(Mxfp4GemmMath math) {
  return math == Mxfp4GemmMath::kWgmma      ? "wgmma"
         : math == Mxfp4GemmMath::kWgmmaF16 ? "wgmma f16"
                                            : "mma f16";
}

// The tiles a math runs (wgmma: whole warpgroups, no 2-warp tile).
// kWgmmaF16: not kW8M128 either (its f16 X tile does not fit).
bool RunsOn(Mxfp4GroupedTile tile, Mxfp4GemmMath math) {
  if (math == Mxfp4GemmMath::kWgmmaF16 && tile == Mxfp4GroupedTile::kW8M128) return false;
  return !Mxfp4MathIsWgmma(math) || ShapeOfMxfp4GroupedTile(tile).warps % 4 == 0;
}

bool AllNanPoison(const std::vector<float>& y, int64_t from) {
  for (size_t i = from; i < y.size(); ++i) {
    uint32_t b;
    std::memcpy(&b, &y[i], 4);
    if (b != 0xFFFFFFFFu) return false;
  }
  return true;
}

struct GemmCase {
  std::vector<int64_t> counts;
  int64_t n, k;
};

TEST(Mxfp4GroupedGemmTest, MatchesTheExactProductWithinTheBoundOnEveryTile) {
  const GemmCase cases[] = {
      {{0, 1, 7, 64, 0, 3}, 300, 512},  // n not a multiple of any tile
      {{64, 1, 0, 7}, 160, 2304},       // V4.1's w2 K
      {{2, 33, 9, 0}, 96, 256},         // more rows than block_m 8 / 32: several passes
      {{70, 0, 5}, 64, 5120},           // V4.1's w1 / w3 K
      // A decode step: 6 rows over 40 experts, hit ones far past the grid's
      // min(40, 11) expert slots (ExpertOfSlot maps slot s to the s-th hit).
      {{0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2,
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 2},
       64,
       256},
  };
  int seed = 1;
  for (Source source : {Source::kRaw, Source::kQuantized}) {
    for (const GemmCase& c : cases) {
      std::mt19937 rng(seed++);
      const std::vector<int64_t> offsets = Offsets(c.counts);
      const int64_t rows = offsets.back() + 5;  // 5 rows in no expert
      std::vector<uint8_t> x, xs;
      QuantizedFp8Rows(rows, c.k, rng, x, xs);
      std::vector<Mxfp4> ws;
      for (size_t e = 0; e < c.counts.size(); ++e) ws.push_back(MakeMxfp4(c.n, c.k, rng, source));
      const DeviceWeights dw(ws);
      std::vector<double> exact, abs_sum;
      Exact(x, xs, offsets, ws, c.n, c.k, exact, abs_sum);
      std::vector<float> mma_first;
      for (Mxfp4GemmMath math : kMaths) {
        const std::vector<float> first =
            RunGemm(x, xs, offsets, dw, c.n, c.k, rows, Mxfp4GroupedTile::kAuto, false, math);
        if (math == Mxfp4GemmMath::kMmaF16) mma_first = first;
        // f16 wgmma: the mma math's bits (its tiles below then match them too).
        if (math == Mxfp4GemmMath::kWgmmaF16) {
          EXPECT_EQ(BitMismatches(first, mma_first), 0) << "wgmma f16 n " << c.n << " k " << c.k;
        }
        int64_t violations = 0;
        double worst = 0;
        for (size_t i = 0; i < exact.size(); ++i) {
          const double err = std::fabs(static_cast<double>(first[i]) - exact[i]);
          if (!(err <= Bound(c.k, math) * abs_sum[i] + 1e-30)) ++violations;  // NaN counts
          if (abs_sum[i] > 0) worst = std::max(worst, err / abs_sum[i]);
        }
        EXPECT_EQ(violations, 0) << "n " << c.n << " k " << c.k << " source "
                                 << static_cast<int>(source) << " " << MathName(math);
        EXPECT_TRUE(AllNanPoison(first, offsets.back() * c.n)) << "rows past the last expert";
        std::printf(
            "grouped gemm %-7s n %-4lld k %-5lld rows %-4lld %s: worst |y - exact| / sum|xw| = "
            "%.3g (bound %.3g)\n",
            MathName(math), static_cast<long long>(c.n), static_cast<long long>(c.k),
            static_cast<long long>(offsets.back()),
            source == Source::kRaw ? "raw      " : "quantized", worst, Bound(c.k, math));
        // Every tile of the math: the same bits (the batch picks the tile).
        for (Mxfp4GroupedTile tile : kPlainTiles) {
          if (!RunsOn(tile, math)) continue;
          EXPECT_EQ(
              BitMismatches(RunGemm(x, xs, offsets, dw, c.n, c.k, rows, tile, false, math), first),
              0)
              << "tile " << static_cast<int>(tile) << " n " << c.n << " k " << c.k << " "
              << MathName(math);
        }
        // bf16 output: the rounded fp32 output.
        std::vector<float> rounded = first;
        for (int64_t i = 0; i < offsets.back() * c.n; ++i) rounded[i] = RoundToBf16(first[i]);
        EXPECT_EQ(BitMismatches(RunGemm(x, xs, offsets, dw, c.n, c.k, rows, Mxfp4GroupedTile::kAuto,
                                        true, math),
                                rounded),
                  0);
      }
    }
  }
}

// Where each 32-row group of W shares its scales, the weight is exactly an
// FP8 weight (e4m3 codes of the e2m1 values, 32 x 32 tile scales):
// Fp8BlockGemm on each expert's rows gives the same bits.
TEST(Mxfp4GroupedGemmTest, EqualsFp8BlockGemmOnTheE4m3FormOfTheWeights) {
  constexpr int64_t kN = 256, kK = 1024;
  const std::vector<int64_t> counts = {1, 7, 64, 0, 20};
  std::mt19937 rng(3);
  const std::vector<int64_t> offsets = Offsets(counts);
  const int64_t rows = offsets.back();
  std::vector<uint8_t> x, xs;
  QuantizedFp8Rows(rows, kK, rng, x, xs);
  std::vector<Mxfp4> ws;
  for (size_t e = 0; e < counts.size(); ++e)
    ws.push_back(MakeMxfp4(kN, kK, rng, Source::kGroupScale));
  const DeviceWeights dw(ws);
  const std::vector<float> got = RunGemm(x, xs, offsets, dw, kN, kK, rows, Mxfp4GroupedTile::kAuto);
  DeviceBuffer<uint8_t> dx(x), dxs(xs);
  for (size_t e = 0; e < counts.size(); ++e) {
    if (counts[e] == 0) continue;
    std::vector<uint8_t> codes(kN * kK), tile_scales(kN / 32 * (kK / 32));
    for (int64_t i = 0; i < kN * kK; ++i) {
      codes[i] = FloatToE4m3(E2m1ToFloat((ws[e].codes[i / 2] >> (4 * (i & 1))) & 0xF));
    }
    for (int64_t g = 0; g < kN / 32; ++g) {
      for (int64_t b = 0; b < kK / 32; ++b) {
        tile_scales[g * (kK / 32) + b] = ws[e].scales[g * 32 * (kK / 32) + b];
      }
    }
    DeviceBuffer<uint8_t> dw8(codes), dws8(tile_scales);
    DeviceBuffer<float> y(counts[e] * kN);
    y.Poison();
    const absl::Status s = dense::Fp8BlockGemm({.x = dx.get() + offsets[e] * kK,
                                                .x_scales = dxs.get() + offsets[e] * (kK / 32),
                                                .w = dw8.get(),
                                                .w_scales = dws8.get(),
                                                .y = y.get(),
                                                .m = counts[e],
                                                .n = kN,
                                                .k = kK},
                                               nullptr);
    ASSERT_TRUE(s.ok()) << s;
    ASSERT_TRUE(Synced());
    const std::vector<float> want = y.Download();
    const std::vector<float> mine(got.begin() + offsets[e] * kN, got.begin() + offsets[e + 1] * kN);
    EXPECT_EQ(BitMismatches(mine, want), 0) << "expert " << e << " rows " << counts[e];
  }
}

// ---- The fused gate/up epilogue -------------------------------------------

// expert_ffn.cuh SwigluOut on the host (fmath: the same operations).
float HostSwiglu(float g, float u, float rw, bool has_rw, float limit, bool round_bf16) {
  if (round_bf16) {
    g = RoundToBf16(g);
    u = RoundToBf16(u);
  }
  if (limit > 0.0f) {
    u = u < -limit ? -limit : (limit < u ? limit : u);
    g = limit < g ? limit : g;
  }
  float h = fmath::FMul(fmath::FDiv(g, fmath::FAdd(1.0f, fmath::ExpF(-g))), u);
  if (has_rw) h = fmath::FMul(rw, h);
  return round_bf16 ? RoundToBf16(h) : h;
}

struct GateUpResult {
  std::vector<uint8_t> h, h_scales;
};

GateUpResult RunGateUp(const std::vector<uint8_t>& x, const std::vector<uint8_t>& xs,
                       const std::vector<int64_t>& offsets, const DeviceWeights& w1,
                       const DeviceWeights& w3, const std::vector<float>& rw, int64_t inter,
                       int64_t dim, int64_t rows, Mxfp4GroupedTile tile, float limit,
                       bool round_bf16, Mxfp4GemmMath math = Mxfp4GemmMath::kMmaF16) {
  DeviceBuffer<uint8_t> dx(x), dxs(xs), h(rows * inter), hs(rows * inter / 32);
  DeviceBuffer<int64_t> doff(offsets);
  DeviceBuffer<float> drw(rw);
  h.Poison();
  hs.Poison();
  const absl::Status s = Mxfp4GroupedGateUp({.x = dx.get(),
                                             .x_scales = dxs.get(),
                                             .expert_offsets = doff.get(),
                                             .w1 = w1.codes->get(),
                                             .w1_scales = w1.scales->get(),
                                             .w3 = w3.codes->get(),
                                             .w3_scales = w3.scales->get(),
                                             .route_weight = rw.empty() ? nullptr : drw.get(),
                                             .h = h.get(),
                                             .h_scales = hs.get(),
                                             .rows = rows,
                                             .inter = inter,
                                             .dim = dim,
                                             .num_experts = static_cast<int>(offsets.size()) - 1,
                                             .swiglu_limit = limit,
                                             .round_bf16 = round_bf16,
                                             .tile = tile,
                                             .math = math},
                                            nullptr);
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_TRUE(Synced());
  return {h.Download(), hs.Download()};
}

// The fused kernel's h equals, bit for bit, SwigluOut of the plain kernel's g
// and u (same sums) quantized by cpu::QuantizeFp8 (= ActQuantFp8), for every
// gate/up tile, with and without bf16 rounding and route weights, a NaN
// weight block included; rows past the last expert stay untouched.
TEST(Mxfp4GroupedGemmTest, GateUpIsSwigluOfTheProductsThenActQuant) {
  constexpr int64_t kDim = 512, kInter = 256;
  const std::vector<int64_t> counts = {0, 1, 7, 64, 3};
  const std::vector<int64_t> offsets = Offsets(counts);
  const int64_t rows = offsets.back() + 3;
  std::mt19937 rng(8);
  std::vector<uint8_t> x, xs;
  QuantizedFp8Rows(rows, kDim, rng, x, xs, -2, 2);
  std::vector<Mxfp4> w1, w3;
  for (size_t e = 0; e < counts.size(); ++e) {
    w1.push_back(MakeMxfp4(kInter, kDim, rng, Source::kQuantized));
    w3.push_back(MakeMxfp4(kInter, kDim, rng, Source::kQuantized));
  }
  w1[3].scales[5 * (kDim / 32) + 2] = 0xFF;  // expert 3, w1 row 5: a NaN block
  std::vector<float> rw(rows);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float& v : rw) v = 0.05f + std::fabs(normal(rng));
  const DeviceWeights d1(w1), d3(w3);
  for (Mxfp4GemmMath math : kMaths) {
    const std::vector<float> g =
        RunGemm(x, xs, offsets, d1, kInter, kDim, rows, Mxfp4GroupedTile::kAuto, false, math);
    const std::vector<float> u =
        RunGemm(x, xs, offsets, d3, kInter, kDim, rows, Mxfp4GroupedTile::kAuto, false, math);
    // The products span the clamp: print how often it bites.
    int64_t clamped = 0;
    for (int64_t i = 0; i < offsets.back() * kInter; ++i) clamped += std::fabs(u[i]) > 10.0f;
    std::printf("gate/up: %lld of %lld up values beyond the clamp\n",
                static_cast<long long>(clamped), static_cast<long long>(offsets.back() * kInter));
    for (bool round_bf16 : {true, false}) {
      for (bool with_rw : {true, false}) {
        const float limit = round_bf16 ? 10.0f : 0.0f;
        // Host: SwigluOut, then the CPU quantizer per row.
        std::vector<uint8_t> want_h(offsets.back() * kInter), want_s(offsets.back() * kInter / 32);
        std::vector<float> h_row(kInter);
        for (int64_t r = 0; r < offsets.back(); ++r) {
          for (int64_t c = 0; c < kInter; ++c) {
            h_row[c] = HostSwiglu(g[r * kInter + c], u[r * kInter + c], with_rw ? rw[r] : 1.0f,
                                  with_rw, limit, round_bf16);
          }
          ASSERT_TRUE(cpu::QuantizeFp8(h_row, 32, std::span(want_h).subspan(r * kInter, kInter),
                                       std::span(want_s).subspan(r * kInter / 32, kInter / 32))
                          .ok());
        }
        for (Mxfp4GroupedTile tile : kGatedTiles) {
          if (!RunsOn(tile, math)) continue;
          const GateUpResult got =
              RunGateUp(x, xs, offsets, d1, d3, with_rw ? rw : std::vector<float>{}, kInter, kDim,
                        rows, tile, limit, round_bf16, math);
          int64_t bad_codes = 0, bad_scales = 0, first = -1;
          for (size_t i = 0; i < want_h.size(); ++i) {
            if (got.h[i] != want_h[i]) {
              ++bad_codes;
              if (first < 0) first = static_cast<int64_t>(i);
            }
          }
          for (size_t i = 0; i < want_s.size(); ++i) bad_scales += got.h_scales[i] != want_s[i];
          EXPECT_EQ(bad_codes, 0) << MathName(math) << " tile " << static_cast<int>(tile)
                                  << " bf16 " << round_bf16 << " rw " << with_rw << " first "
                                  << first;
          EXPECT_EQ(bad_scales, 0) << "tile " << static_cast<int>(tile);
          for (size_t i = want_h.size(); i < got.h.size(); ++i) ASSERT_EQ(got.h[i], 0xFF) << i;
          for (size_t i = want_s.size(); i < got.h_scales.size(); ++i) {
            ASSERT_EQ(got.h_scales[i], 0xFF) << i;
          }
        }
        // The NaN block: expert 3's rows, columns 0..31 (the block of column 5).
        const GateUpResult got = RunGateUp(x, xs, offsets, d1, d3, rw, kInter, kDim, rows,
                                           Mxfp4GroupedTile::kAuto, limit, round_bf16, math);
        for (int64_t r = offsets[3]; r < offsets[4]; ++r) {
          EXPECT_EQ(got.h_scales[r * kInter / 32], 0xFF) << r;
          EXPECT_EQ(got.h[r * kInter + 5], 0x7F) << r;
          EXPECT_NE(got.h_scales[r * kInter / 32 + 1], 0xFF) << r;
        }
      }
    }
  }
}

// ---- Batch invariance ------------------------------------------------------

struct Ffn {
  int64_t dim, inter;
  std::vector<Mxfp4> w1, w3, w2;
  std::unique_ptr<DeviceWeights> d1, d3, d2;
};

Ffn MakeFfn(int experts, int64_t dim, int64_t inter, std::mt19937& rng) {
  Ffn f{dim, inter};
  for (int e = 0; e < experts; ++e) {
    f.w1.push_back(MakeMxfp4(inter, dim, rng, Source::kQuantized));
    f.w3.push_back(MakeMxfp4(inter, dim, rng, Source::kQuantized));
    f.w2.push_back(MakeMxfp4(dim, inter, rng, Source::kQuantized));
  }
  f.d1 = std::make_unique<DeviceWeights>(f.w1);
  f.d3 = std::make_unique<DeviceWeights>(f.w3);
  f.d2 = std::make_unique<DeviceWeights>(f.w2);
  return f;
}

struct FfnOut {
  std::vector<uint8_t> h, h_scales;
  std::vector<float> y;
};

FfnOut RunFfn(const Ffn& f, const std::vector<uint8_t>& x, const std::vector<uint8_t>& xs,
              const std::vector<int64_t>& offsets, const std::vector<float>& rw, int64_t rows,
              Mxfp4GroupedTile gate_up_tile, Mxfp4GroupedTile down_tile,
              Mxfp4GemmMath math = Mxfp4GemmMath::kMmaF16) {
  DeviceBuffer<uint8_t> dx(x), dxs(xs), h(rows * f.inter), hs(rows * f.inter / 32);
  DeviceBuffer<int64_t> doff(offsets);
  DeviceBuffer<float> drw(rw), y(rows * f.dim);
  h.Poison();
  hs.Poison();
  y.Poison();
  const absl::Status s = Mxfp4ExpertFfn({.x = dx.get(),
                                         .x_scales = dxs.get(),
                                         .expert_offsets = doff.get(),
                                         .route_weight = drw.get(),
                                         .w1 = f.d1->codes->get(),
                                         .w1_scales = f.d1->scales->get(),
                                         .w3 = f.d3->codes->get(),
                                         .w3_scales = f.d3->scales->get(),
                                         .w2 = f.d2->codes->get(),
                                         .w2_scales = f.d2->scales->get(),
                                         .h = h.get(),
                                         .h_scales = hs.get(),
                                         .y = y.get(),
                                         .rows = rows,
                                         .dim = f.dim,
                                         .inter = f.inter,
                                         .num_experts = static_cast<int>(offsets.size()) - 1,
                                         .gate_up_tile = gate_up_tile,
                                         .down_tile = down_tile,
                                         .math = math},
                                        nullptr);
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_TRUE(Synced());
  return {h.Download(), hs.Download(), y.Download()};
}

// A row alone in its expert (all other experts empty) and the same row among
// 63 others of its expert (first, middle, last) while other experts hold 7,
// 64, 1 rows: identical h, h scales and y bits, for every tile pair.
TEST(Mxfp4GroupedGemmTest, ARowsResultDoesNotDependOnTheBatch) {
  constexpr int kExperts = 5, kTarget = 2;
  constexpr int64_t kDim = 512, kInter = 256;
  std::mt19937 rng(21);
  const Ffn f = MakeFfn(kExperts, kDim, kInter, rng);
  std::vector<uint8_t> row_x, row_s;
  QuantizedFp8Rows(1, kDim, rng, row_x, row_s, -2, 2);
  const float row_rw = 0.7f;
  for (Mxfp4GemmMath math : kMaths) {
    const FfnOut alone = RunFfn(f, row_x, row_s, Offsets({0, 0, 1, 0, 0}), {row_rw}, 1,
                                Mxfp4GroupedTile::kAuto, Mxfp4GroupedTile::kAuto, math);
    ASSERT_EQ(alone.y.size(), static_cast<size_t>(kDim));
    for (float v : alone.y) ASSERT_TRUE(std::isfinite(v));
    const std::vector<int64_t> counts = {7, 64, 64, 1, 0};
    const std::vector<int64_t> offsets = Offsets(counts);
    const int64_t rows = offsets.back();
    std::vector<uint8_t> x, xs;
    std::mt19937 batch_rng(22);
    QuantizedFp8Rows(rows, kDim, batch_rng, x, xs, -2, 2);
    std::vector<float> rw(rows);
    for (float& v : rw) v = 0.1f + static_cast<float>(batch_rng() % 100) / 100.0f;
    const std::pair<Mxfp4GroupedTile, Mxfp4GroupedTile> tiles[] = {
        {Mxfp4GroupedTile::kAuto, Mxfp4GroupedTile::kAuto},
        {Mxfp4GroupedTile::kW4M8,
         Mxfp4MathIsWgmma(math) ? Mxfp4GroupedTile::kW4M8S4 : Mxfp4GroupedTile::kW2M8},
        {Mxfp4GroupedTile::kW4M32, Mxfp4GroupedTile::kW4M32},
        {Mxfp4GroupedTile::kW8M64, Mxfp4GroupedTile::kW8M64}};
    for (int64_t pos : {int64_t{0}, int64_t{31}, int64_t{63}}) {
      const int64_t r = offsets[kTarget] + pos;
      std::copy(row_x.begin(), row_x.end(), x.begin() + r * kDim);
      std::copy(row_s.begin(), row_s.end(), xs.begin() + r * kDim / 32);
      std::vector<float> rw_r = rw;
      rw_r[r] = row_rw;
      for (auto [gu, down] : tiles) {
        const FfnOut out = RunFfn(f, x, xs, offsets, rw_r, rows, gu, down, math);
        const std::vector<float> y(out.y.begin() + r * kDim, out.y.begin() + (r + 1) * kDim);
        EXPECT_EQ(BitMismatches(y, alone.y), 0)
            << MathName(math) << " position " << pos << " tiles " << static_cast<int>(gu) << "/"
            << static_cast<int>(down);
        EXPECT_TRUE(std::equal(alone.h.begin(), alone.h.end(), out.h.begin() + r * kInter));
        EXPECT_TRUE(std::equal(alone.h_scales.begin(), alone.h_scales.end(),
                               out.h_scales.begin() + r * kInter / 32));
      }
    }
  }
}

// ---- End to end against kernels/cpu ---------------------------------------

// Mxfp4ExpertFfn against cpu::SwigluExpert on the same MXFP4 weights and the
// same activations (the CPU quantizes x to FP8 itself; the GPU gets
// cpu::QuantizeFp8's codes). Only the fp32 order of the dot products differs,
// so bf16 / FP8 rounding flips near ties are rare: expert_ffn_test's MXFP4
// tolerance (5e-3 relative Frobenius), and at most 5 % of y differing at all.
TEST(Mxfp4GroupedGemmTest, ExpertFfnMatchesTheCpuExperts) {
  constexpr int64_t kDim = 512, kInter = 256;
  const std::vector<int64_t> counts = {0, 1, 7, 64, 3};
  const std::vector<int64_t> offsets = Offsets(counts);
  const int64_t rows = offsets.back();
  std::mt19937 rng(31);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(rows * kDim), rw(rows);
  for (float& v : x) v = normal(rng);
  for (float& v : rw) v = 0.05f + std::fabs(normal(rng));
  std::vector<moe_test::StoredWeight> s1, s3, s2;
  Ffn f{kDim, kInter};
  for (size_t e = 0; e < counts.size(); ++e) {
    s1.push_back(moe_test::MakeWeight(cpu::WeightFormat::kMxfp4, kInter, kDim,
                                      4.0f / std::sqrt(float(kDim)), rng));
    s3.push_back(moe_test::MakeWeight(cpu::WeightFormat::kMxfp4, kInter, kDim,
                                      2.0f / std::sqrt(float(kDim)), rng));
    s2.push_back(moe_test::MakeWeight(cpu::WeightFormat::kMxfp4, kDim, kInter,
                                      1.0f / std::sqrt(float(kInter)), rng));
    f.w1.push_back({kInter, kDim, s1.back().data, s1.back().scales});
    f.w3.push_back({kInter, kDim, s3.back().data, s3.back().scales});
    f.w2.push_back({kDim, kInter, s2.back().data, s2.back().scales});
  }
  f.d1 = std::make_unique<DeviceWeights>(f.w1);
  f.d3 = std::make_unique<DeviceWeights>(f.w3);
  f.d2 = std::make_unique<DeviceWeights>(f.w2);
  std::vector<float> want(rows * kDim);
  for (size_t e = 0; e < counts.size(); ++e) {
    if (counts[e] == 0) continue;
    const cpu::ExpertWeights w{s1[e].View(), s2[e].View(), s3[e].View()};
    const absl::Status s = cpu::SwigluExpert(
        w, {.x = std::span<const float>(x).subspan(offsets[e] * kDim, counts[e] * kDim),
            .route_weight = std::span<const float>(rw).subspan(offsets[e], counts[e]),
            .y = std::span<float>(want).subspan(offsets[e] * kDim, counts[e] * kDim),
            .rows = counts[e],
            .swiglu_limit = 10.0f,
            .bf16_boundaries = true});
    ASSERT_TRUE(s.ok()) << s;
  }
  std::vector<uint8_t> xc(rows * kDim), xsc(rows * kDim / 32);
  ASSERT_TRUE(cpu::QuantizeFp8(x, 32, xc, xsc).ok());
  const FfnOut got =
      RunFfn(f, xc, xsc, offsets, rw, rows, Mxfp4GroupedTile::kAuto, Mxfp4GroupedTile::kAuto);
  const double rel = moe_test::RelativeError(got.y, want);
  const int64_t differ = BitMismatches(got.y, want);
  std::printf(
      "Mxfp4ExpertFfn vs cpu::SwigluExpert: rel err %.3g, max abs err %.3g, %lld/%lld "
      "elements differ\n",
      rel, moe_test::MaxAbsError(got.y, want), static_cast<long long>(differ),
      static_cast<long long>(rows * kDim));
  EXPECT_LT(rel, 5e-3);
  EXPECT_LE(differ * 20, rows * kDim);
}

// ---- Missing weights, graphs, arguments, empty experts ----------------------

TEST(Mxfp4GroupedGemmTest, MissingWeightsGiveNanRowsOnlyForTheirExpert) {
  constexpr int64_t kN = 64, kK = 256;
  const std::vector<int64_t> counts = {3, 2, 4, 1};
  const std::vector<int64_t> offsets = Offsets(counts);
  const int64_t rows = offsets.back();
  std::mt19937 rng(5);
  std::vector<uint8_t> x, xs;
  QuantizedFp8Rows(rows, kK, rng, x, xs);
  std::vector<Mxfp4> ws;
  for (size_t e = 0; e < counts.size(); ++e) ws.push_back(MakeMxfp4(kN, kK, rng, Source::kRaw));
  const DeviceWeights full(ws);
  const std::vector<float> want =
      RunGemm(x, xs, offsets, full, kN, kK, rows, Mxfp4GroupedTile::kAuto);
  // Expert 1: null codes; expert 2: codes 8 bytes off 16-byte alignment.
  const DeviceWeights holes(ws, {{1, nullptr}, {2, full.owned[4]->get() + 8}});
  const std::vector<float> got =
      RunGemm(x, xs, offsets, holes, kN, kK, rows, Mxfp4GroupedTile::kAuto);
  for (int64_t r = 0; r < rows; ++r) {
    const bool nan_row = r >= offsets[1] && r < offsets[3];
    for (int64_t c = 0; c < kN; ++c) {
      if (nan_row) {
        EXPECT_TRUE(std::isnan(got[r * kN + c])) << r << ", " << c;
      } else {
        EXPECT_EQ(got[r * kN + c], want[r * kN + c]) << r << ", " << c;
      }
    }
  }
  // Gate/up with expert 1's w3 missing: its h blocks are the quantizer's NaN blocks.
  const GateUpResult h = RunGateUp(x, xs, offsets, full, holes, {}, kN, kK, rows,
                                   Mxfp4GroupedTile::kAuto, 10.0f, true);
  for (int64_t r = 0; r < rows; ++r) {
    const bool nan_row = r >= offsets[1] && r < offsets[3];
    EXPECT_EQ(h.h_scales[r * kN / 32] == 0xFF, nan_row) << r;
    EXPECT_EQ(h.h[r * kN] == 0x7F, nan_row) << r;
  }
}

// One captured graph of Mxfp4ExpertFfn replayed under two routings written to
// the device offsets in between gives what direct calls give.
TEST(Mxfp4GroupedGemmTest, ReplaysFromACudaGraphUnderChangingOffsets) {
  constexpr int64_t kDim = 256, kInter = 256;
  std::mt19937 rng(13);
  const Ffn f = MakeFfn(4, kDim, kInter, rng);
  constexpr int64_t kRows = 24;
  std::vector<uint8_t> x, xs;
  QuantizedFp8Rows(kRows, kDim, rng, x, xs, -2, 2);
  std::vector<float> rw(kRows, 0.5f);
  const std::vector<int64_t> a = Offsets({10, 0, 14, 0}), b = Offsets({1, 7, 3, 13});
  const FfnOut want_a =
      RunFfn(f, x, xs, a, rw, kRows, Mxfp4GroupedTile::kAuto, Mxfp4GroupedTile::kAuto);
  const FfnOut want_b =
      RunFfn(f, x, xs, b, rw, kRows, Mxfp4GroupedTile::kAuto, Mxfp4GroupedTile::kAuto);
  DeviceBuffer<uint8_t> dx(x), dxs(xs), h(kRows * kInter), hs(kRows * kInter / 32);
  DeviceBuffer<int64_t> doff(a);
  DeviceBuffer<float> drw(rw), y(kRows * kDim);
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  cudaGraph_t graph;
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
  const absl::Status s = Mxfp4ExpertFfn({.x = dx.get(),
                                         .x_scales = dxs.get(),
                                         .expert_offsets = doff.get(),
                                         .route_weight = drw.get(),
                                         .w1 = f.d1->codes->get(),
                                         .w1_scales = f.d1->scales->get(),
                                         .w3 = f.d3->codes->get(),
                                         .w3_scales = f.d3->scales->get(),
                                         .w2 = f.d2->codes->get(),
                                         .w2_scales = f.d2->scales->get(),
                                         .h = h.get(),
                                         .h_scales = hs.get(),
                                         .y = y.get(),
                                         .rows = kRows,
                                         .dim = kDim,
                                         .inter = kInter,
                                         .num_experts = 4,
                                         .rows_per_expert_hint = kRows},
                                        stream);
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  ASSERT_TRUE(s.ok()) << s;
  cudaGraphExec_t exec;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  for (const auto* routing : {&a, &b, &a}) {
    y.Poison();
    doff.Upload(*routing);
    ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    EXPECT_EQ(BitMismatches(y.Download(), routing == &a ? want_a.y : want_b.y), 0);
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

TEST(Mxfp4GroupedGemmTest, RefusesBadArguments) {
  DeviceBuffer<uint8_t> buf(1 << 16);
  uint8_t* d = buf.get();
  const uint8_t* const* arr = reinterpret_cast<const uint8_t* const*>(d);
  const Mxfp4GroupedGemmParams good{.x = d,
                                    .x_scales = d,
                                    .expert_offsets = reinterpret_cast<const int64_t*>(d),
                                    .w = arr,
                                    .w_scales = arr,
                                    .y = reinterpret_cast<float*>(d),
                                    .rows = 0,
                                    .n = 32,
                                    .k = 256,
                                    .num_experts = 1};
  EXPECT_TRUE(Mxfp4GroupedGemm(good, nullptr).ok());  // rows 0: nothing launched
  Mxfp4GroupedGemmParams two_warps = good;
  two_warps.rows = 1;
  two_warps.tile = Mxfp4GroupedTile::kW2M8;
  two_warps.math = Mxfp4GemmMath::kWgmma;  // a warpgroup is 4 warps
  EXPECT_EQ(Mxfp4GroupedGemm(two_warps, nullptr).code(), absl::StatusCode::kInvalidArgument);
  Mxfp4GroupedGemmParams p = good;
  p.k = 128;
  EXPECT_EQ(Mxfp4GroupedGemm(p, nullptr).code(), absl::StatusCode::kInvalidArgument);
  p = good, p.x = d + 8;
  EXPECT_EQ(Mxfp4GroupedGemm(p, nullptr).code(), absl::StatusCode::kInvalidArgument);
  Mxfp4GroupedGateUpParams q{.x = d,
                             .x_scales = d,
                             .expert_offsets = reinterpret_cast<const int64_t*>(d),
                             .w1 = arr,
                             .w1_scales = arr,
                             .w3 = arr,
                             .w3_scales = arr,
                             .h = d,
                             .h_scales = d,
                             .rows = 0,
                             .inter = 32,
                             .dim = 256,
                             .num_experts = 1,
                             .tile = Mxfp4GroupedTile::kW2M8};
  EXPECT_EQ(Mxfp4GroupedGateUp(q, nullptr).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Synced());
}

// Offsets that break the contract (decreasing, negative, past rows) are
// clamped into [0, rows]: nothing is read or written out of bounds (run under
// compute-sanitizer memcheck too), rows past `rows` stay untouched, and a
// row range only one expert claims gets that expert's product.
TEST(Mxfp4GroupedGemmTest, BadOffsetsStayInBounds) {
  constexpr int64_t kN = 64, kK = 256, kRows = 6, kAlloc = 8;
  std::mt19937 rng(9);
  std::vector<uint8_t> x, xs;
  QuantizedFp8Rows(kAlloc, kK, rng, x, xs);
  std::vector<Mxfp4> ws;
  for (int e = 0; e < 4; ++e) ws.push_back(MakeMxfp4(kN, kK, rng, Source::kRaw));
  const DeviceWeights dw(ws);
  const std::vector<float> want =
      RunGemm(x, xs, Offsets({3, 0, 0, 0}), dw, kN, kK, kAlloc, Mxfp4GroupedTile::kAuto);
  // Expert 0 [0, 5), expert 1 [5, 3) empty, expert 2 [3, 6) (100 clamped),
  // expert 3 [6, 0) empty; rows 0..2 are expert 0's alone.
  const std::vector<int64_t> bad = {0, 5, 3, 100, -4};
  DeviceBuffer<uint8_t> dx(x), dxs(xs);
  DeviceBuffer<int64_t> doff(bad);
  DeviceBuffer<float> y(kAlloc * kN);
  y.Poison();
  ASSERT_TRUE(Mxfp4GroupedGemm({.x = dx.get(),
                                .x_scales = dxs.get(),
                                .expert_offsets = doff.get(),
                                .w = dw.codes->get(),
                                .w_scales = dw.scales->get(),
                                .y = y.get(),
                                .rows = kRows,
                                .n = kN,
                                .k = kK,
                                .num_experts = 4},
                               nullptr)
                  .ok());
  ASSERT_TRUE(Synced());
  const std::vector<float> got = y.Download();
  EXPECT_EQ(BitMismatches(std::vector<float>(got.begin(), got.begin() + 3 * kN),
                          std::vector<float>(want.begin(), want.begin() + 3 * kN)),
            0);
  EXPECT_TRUE(AllNanPoison(got, kRows * kN));
}

// Experts without rows read nothing: their pointers are bogus (aligned,
// unmapped) and the launch still succeeds. Last in the file: a fault would
// poison the context for every later test.
TEST(Mxfp4GroupedGemmTest, EmptyExpertsReadNoWeights) {
  constexpr int64_t kN = 64, kK = 256;
  const std::vector<int64_t> counts = {0, 2, 0, 0};
  const std::vector<int64_t> offsets = Offsets(counts);
  std::mt19937 rng(2);
  std::vector<uint8_t> x, xs;
  QuantizedFp8Rows(2, kK, rng, x, xs);
  std::vector<Mxfp4> ws;
  for (int e = 0; e < 4; ++e) ws.push_back(MakeMxfp4(kN, kK, rng, Source::kRaw));
  const DeviceWeights good(ws);
  const std::vector<float> want = RunGemm(x, xs, offsets, good, kN, kK, 2, Mxfp4GroupedTile::kAuto);
  const uint8_t* bogus = reinterpret_cast<const uint8_t*>(uintptr_t{1} << 46);
  const DeviceWeights holes(ws, {{0, bogus}, {2, bogus}, {3, bogus}});
  EXPECT_EQ(BitMismatches(RunGemm(x, xs, offsets, holes, kN, kK, 2, Mxfp4GroupedTile::kAuto), want),
            0);
}

}  // namespace
}  // namespace weir::kernels::cuda
