// GPU test of Fp8BlockGemm: against the exact (double) product of the
// dequantized operands, bit-identity across tiles and batch compositions,
// NaN blocks, bf16 output, graph capture and bad arguments.

#include "kernels/cuda/dense/fp8_block_gemm_sm90.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/common/numeric_formats.h"
#include "kernels/cpu/quant.h"
#include "kernels/cpu/weight_quant.h"
#include "kernels/cuda/dense/test_util.h"
#include "kernels/cuda/rope.h"

namespace weir::kernels::cuda::dense {
namespace {

// Both operands in stored form, on the host.
struct Operands {
  int64_t m = 0, n = 0, k = 0;
  std::vector<uint8_t> x, x_scales;  // [m, k], [m, k/32]
  std::vector<uint8_t> w, w_scales;  // [n, k], [ceil(n/32), k/32]
};

enum class Source {
  kQuantized,  // fp32 values through cpu::QuantizeFp8 / QuantizeFp8Weight
  kRawCodes,   // any finite code, scales 2^-15 .. 2^12
};

Operands MakeOperands(int64_t m, int64_t n, int64_t k, uint32_t seed, Source source) {
  Operands op{.m = m, .n = n, .k = k};
  std::mt19937 rng(seed);
  const int64_t n_groups = (n + 31) / 32;
  if (source == Source::kQuantized) {
    QuantizedFp8Rows(m, k, rng, op.x, op.x_scales);
    std::normal_distribution<float> normal(0.0f, 0.05f);
    std::uniform_int_distribution<int> exponent(-6, 6);
    std::vector<float> w(n * k);
    for (int64_t r = 0; r < n; ++r) {
      for (int64_t c = 0; c < k; ++c) w[r * k + c] = normal(rng);
    }
    // Tile magnitudes differ too (every 32 x 32 tile its own scale).
    for (int64_t g = 0; g < n_groups; ++g) {
      for (int64_t kb = 0; kb < k / 32; ++kb) {
        const float s = std::ldexp(1.0f, exponent(rng));
        for (int64_t r = g * 32; r < std::min(n, g * 32 + 32); ++r) {
          for (int64_t c = kb * 32; c < kb * 32 + 32; ++c) w[r * k + c] *= s;
        }
      }
    }
    op.w.resize(n * k);
    op.w_scales.resize(cpu::Fp8WeightScaleCount(n, k, 32));
    EXPECT_TRUE(cpu::QuantizeFp8Weight(w, n, k, 32, op.w, op.w_scales).ok());
  } else {
    std::uniform_int_distribution<int> byte(0, 255), scale(112, 139);
    auto code = [&] {
      int c;
      do c = byte(rng);
      while ((c & 0x7F) == 0x7F);  // no NaN codes
      return static_cast<uint8_t>(c);
    };
    op.x.resize(m * k);
    op.w.resize(n * k);
    for (auto& c : op.x) c = code();
    for (auto& c : op.w) c = code();
    op.x_scales.resize(m * k / 32);
    op.w_scales.resize(n_groups * (k / 32));
    for (auto& s : op.x_scales) s = static_cast<uint8_t>(scale(rng));
    for (auto& s : op.w_scales) s = static_cast<uint8_t>(scale(rng));
  }
  return op;
}

// The exact product of the dequantized operands (each dequantized value is an
// fp32 with a 4-bit significand, so every product is exact in double and the
// double sum is exact to ~1e-16 relative), and sum_k |x_k w_k| per element.
// block_max: per output, the sum over 32-element K blocks of the block's
// largest |x w| (what FP8 wgmma's alignment error scales with).
void Exact(const Operands& op, std::vector<double>& y, std::vector<double>& abs_sum,
           std::vector<double>* block_max = nullptr) {
  std::vector<float> x(op.m * op.k), w(op.n * op.k);
  ASSERT_TRUE(cpu::DequantizeFp8(op.x, op.x_scales, 32, x).ok());
  ASSERT_TRUE(cpu::DequantizeFp8Weight(op.w, op.w_scales, op.n, op.k, 32, w).ok());
  y.assign(op.m * op.n, 0.0);
  abs_sum.assign(op.m * op.n, 0.0);
  if (block_max != nullptr) block_max->assign(op.m * op.n, 0.0);
  for (int64_t i = 0; i < op.m; ++i) {
    const float* xr = &x[i * op.k];
    for (int64_t j = 0; j < op.n; ++j) {
      const float* wr = &w[j * op.k];
      double s = 0, a = 0, bm = 0, block = 0;
      for (int64_t c = 0; c < op.k; ++c) {
        const double p = static_cast<double>(xr[c]) * wr[c];
        s += p;
        a += std::fabs(p);
        block = std::max(block, std::fabs(p));
        if (c % 32 == 31 || c == op.k - 1) {
          bm += block;
          block = 0;
        }
      }
      y[i * op.n + j] = s;
      abs_sum[i * op.n + j] = a;
      if (block_max != nullptr) (*block_max)[i * op.n + j] = bm;
    }
  }
}

// Runs Fp8BlockGemm with NaN-poisoned output; returns the fp32 result (bf16
// results widened), empty on failure. The activation scales start
// `scale_offset` bytes into their buffer (1: not 4-byte aligned, which takes
// the kernel's register path for scales).
// `fused`: with a split, the last split of each tile sums the partials
// (split_counters); the counters must be zero again afterwards.
std::vector<float> RunGpu(const Operands& op, Fp8GemmTile tile,
                          Fp8GemmOutput output = Fp8GemmOutput::kF32, int scale_offset = 0,
                          int splits = 1, bool fused = false,
                          Fp8GemmMath math = Fp8GemmMath::kMmaF16, bool panel = false,
                          const Fp8BlockGemmParams::Rope* rope = nullptr, bool ws_halves = false,
                          bool scaled_panel = false) {
  DeviceBuffer<uint8_t> x(op.x), w(op.w), ws(op.w_scales);
  DeviceBuffer<uint16_t> x16(panel ? op.m * op.k : 1);
  DeviceBuffer<uint8_t> xs(static_cast<int64_t>(op.x_scales.size()) + 4);
  if (xs.ok()) {
    cudaMemcpy(xs.get() + scale_offset, op.x_scales.data(), op.x_scales.size(),
               cudaMemcpyHostToDevice);
  }
  DeviceBuffer<float> y(op.m * op.n);  // large enough for bf16 too
  if (!x.ok() || !xs.ok() || !w.ok() || !ws.ok() || !y.ok() || !x16.ok()) {
    ADD_FAILURE() << "cudaMalloc";
    return {};
  }
  y.Poison(0xFF);  // NaN in fp32 and in bf16
  if (panel) {
    const absl::Status widened =
        WidenFp8ToF16Panel({.codes = x.get(),
                            .out = x16.get(),
                            .rows = op.m,
                            .k = op.k,
                            .scales = scaled_panel ? xs.get() + scale_offset : nullptr},
                           nullptr);
    EXPECT_TRUE(widened.ok()) << widened;
  }
  DeviceBuffer<float> scratch(std::max<int64_t>(1, splits * op.m * op.n));
  scratch.Poison(0xFF);
  Fp8BlockGemmParams params{.x = x.get(),
                            .x_scales = xs.get() + scale_offset,
                            .w = w.get(),
                            .w_scales = ws.get(),
                            .y = y.get(),
                            .m = op.m,
                            .n = op.n,
                            .k = op.k,
                            .output = output,
                            .tile = tile,
                            .k_splits = splits,
                            .split_scratch = splits > 1 ? scratch.get() : nullptr,
                            .math = math,
                            .x_f16 = panel ? x16.get() : nullptr,
                            .x_f16_scaled = panel && scaled_panel,
                            .ws_halves = ws_halves};
  if (rope != nullptr) params.rope = *rope;
  const int64_t counters = std::max<int64_t>(1, Fp8GemmSplitCounters(params));
  DeviceBuffer<uint32_t> counter(counters);
  counter.Poison(0);
  if (fused && splits > 1) {
    params.split_counters = counter.get();
    params.split_counter_count = Fp8GemmSplitCounters(params);
  }
  const absl::Status status = Fp8BlockGemm(params, nullptr);
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  if (fused && splits > 1) {
    const std::vector<uint32_t> left = counter.Download();
    EXPECT_EQ(std::count(left.begin(), left.end(), 0u), counters) << "counters not reset";
  }
  std::vector<float> out = y.Download();
  if (output == Fp8GemmOutput::kBf16) {
    std::vector<uint16_t> bits(op.m * op.n);
    std::memcpy(bits.data(), out.data(), bits.size() * 2);
    out.resize(op.m * op.n);
    for (size_t i = 0; i < bits.size(); ++i) out[i] = Bf16BitsToFloat(bits[i]);
  }
  return out;
}

// Error allowed for the tensor core's 32-element block sums, relative to
// sum |x w|. The products are exact (e4m3 -> f16 is exact, f16 x f16 fits
// fp32) and each block sum rounds at fp32 precision (TensorCoreBlockSum
// shows 1 + 2^-18 kept), so a few 2^-24 per block would do; 1e-5 leaves room
// for the hardware's alignment truncation. The fp32 fold adds one rounding
// (2^-24 of the running sum, itself <= sum |x w|) per block, so the bound is
//   |y - exact| <= (kTensorCoreRel + (k/32) * 2^-24) * sum_k |x_k w_k| + 1e-30.
// Measured worst on an H200: 7.1e-7 (k = 8192, raw codes).
constexpr double kTensorCoreRel = 1e-5;

struct Agreement {
  int64_t violations = 0;
  double worst_ratio = 0;  // max |y - exact| / sum |x w|
};

// ... and for Fp8GemmMath::kWgmma: Hopper's FP8 MMA does not keep a
// block's sum at fp32 precision: it aligns the 32 products to the largest
// exponent among them and keeps about 13 fraction bits (DeepSeek-V3 report:
// "around 14 bits"), dropping the rest. So each product may lose up to
// 2^-13 of the block's largest |x w|; allowed: 2^-12 a product (twice that,
// for truncation of a two's-complement alignment and an accumulator that is
// itself aligned), 32 products a block:
//   |y - exact| <= 2^-7 * sum_blocks max_j |x_j w_j|  (+ the fp32 terms).
// Relative to sum|xw| that is 2^-7 at worst (one product dominating each
// block) and ~2^-10 on these operands; measured worst on an H200 with this
// file's operands: 6.7e-4 of sum|xw| (m 300, raw codes), against 7e-7 for
// the mma maths. A wrong descriptor, fragment or scale is off by O(1).
constexpr double kWgmmaPerBlockMax = 1.0 / 128;

// With a split, the S partial sums are folded block by block as above and
// then added in split order: S - 1 more roundings of at most 2^-24 sum|xw|.
Agreement Compare(const Operands& op, const std::vector<float>& got, int splits = 1,
                  Fp8GemmMath math = Fp8GemmMath::kMmaF16) {
  const bool wgmma = math == Fp8GemmMath::kWgmma;
  std::vector<double> exact, abs_sum, block_max;
  Exact(op, exact, abs_sum, wgmma ? &block_max : nullptr);
  Agreement a;
  const double rel = (wgmma ? 0.0 : kTensorCoreRel) +
                     static_cast<double>(op.k / 32 + splits - 1) * std::ldexp(1.0, -24);
  for (size_t i = 0; i < exact.size(); ++i) {
    const double err = std::fabs(static_cast<double>(got[i]) - exact[i]);
    const double bound =
        rel * abs_sum[i] + (wgmma ? kWgmmaPerBlockMax * block_max[i] : 0.0) + 1e-30;
    if (!(err <= bound)) ++a.violations;  // NaN counts
    if (abs_sum[i] > 0) a.worst_ratio = std::max(a.worst_ratio, err / abs_sum[i]);
  }
  return a;
}

struct Shape {
  int64_t m, n, k;
};

TEST(Fp8BlockGemmTest, MatchesTheExactProductWithinTheBound) {
  const Shape shapes[] = {
      {1, 64, 32},     {1, 1280, 5120},  // one row: K = 32, and V4.1's wq_a
      {3, 33, 96},     {7, 100, 160},    // N not a multiple of any tile; K % 128 != 0
      {8, 512, 1024},  {16, 70, 256},   {17, 257, 1024}, {33, 96, 2304},
      {64, 130, 1280}, {65, 96, 256},   {200, 150, 512}, {300, 257, 8192},
  };
  for (Source source : {Source::kQuantized, Source::kRawCodes}) {
    for (const Shape& s : shapes) {
      const Operands op = MakeOperands(s.m, s.n, s.k, 17 * s.m + s.n + s.k, source);
      const std::vector<float> got = RunGpu(op, Fp8GemmTile::kAuto);
      ASSERT_EQ(got.size(), static_cast<size_t>(s.m * s.n));
      const Agreement a = Compare(op, got);
      EXPECT_EQ(a.violations, 0) << s.m << "x" << s.n << "x" << s.k << " source "
                                 << static_cast<int>(source);
      std::printf("m %-4lld n %-5lld k %-5lld %s: worst |y - exact| / sum|xw| = %.3g\n",
                  static_cast<long long>(s.m), static_cast<long long>(s.n),
                  static_cast<long long>(s.k), source == Source::kQuantized ? "quantized" : "raw",
                  a.worst_ratio);
    }
  }
}

TEST(Fp8BlockGemmTest, EveryTileGivesTheSameBits) {
  for (const Shape& s :
       {Shape{1, 300, 512}, Shape{13, 257, 1056}, Shape{64, 160, 4096}, Shape{150, 200, 384}}) {
    const Operands op = MakeOperands(s.m, s.n, s.k, 5 + s.m, Source::kQuantized);
    const std::vector<float> first = RunGpu(op, kAllFp8GemmTiles[0]);
    const Agreement a = Compare(op, first);
    EXPECT_EQ(a.violations, 0);
    for (Fp8GemmTile tile : kAllFp8GemmTiles) {
      int64_t at = -1;
      EXPECT_EQ(BitMismatches(RunGpu(op, tile), first, &at), 0)
          << "tile " << static_cast<int>(tile) << " shape " << s.m << "x" << s.n << "x" << s.k
          << " first mismatch " << at;
    }
  }
}

// k % 128 == 0 with 4-byte aligned scales copies the scale words with
// cp.async; otherwise they go through registers. Same arithmetic, same bits.
TEST(Fp8BlockGemmTest, BothScalePathsGiveTheSameBits) {
  for (Fp8GemmTile tile : kAllFp8GemmTiles) {
    const Operands op = MakeOperands(40, 100, 1024, 31, Source::kQuantized);
    int64_t at = -1;
    EXPECT_EQ(BitMismatches(RunGpu(op, tile, Fp8GemmOutput::kF32, 1), RunGpu(op, tile), &at), 0)
        << "tile " << static_cast<int>(tile) << " first mismatch " << at;
  }
}

// A row alone (m = 1) and the same row at several positions of batches of
// other random rows give the same bits, with the automatic tile and with
// every tile.
TEST(Fp8BlockGemmTest, ARowsResultDoesNotDependOnTheBatch) {
  constexpr int64_t kN = 384, kK = 2048;
  Operands alone = MakeOperands(1, kN, kK, 99, Source::kQuantized);
  const std::vector<float> want = RunGpu(alone, Fp8GemmTile::kAuto);
  std::mt19937 rng(4);
  for (int64_t m : {7, 64, 200, 4096}) {
    for (int64_t pos : {int64_t{0}, m / 2 + 1, m - 1}) {
      Operands batch = alone;
      batch.m = m;
      QuantizedFp8Rows(m, kK, rng, batch.x, batch.x_scales);
      std::copy(alone.x.begin(), alone.x.end(), batch.x.begin() + pos * kK);
      std::copy(alone.x_scales.begin(), alone.x_scales.end(),
                batch.x_scales.begin() + pos * (kK / 32));
      for (Fp8GemmTile tile :
           {Fp8GemmTile::kAuto, Fp8GemmTile::kN32M8, Fp8GemmTile::kN16M32W2, Fp8GemmTile::kN16M64W4,
            Fp8GemmTile::kN64M64, Fp8GemmTile::kN128M128}) {
        const std::vector<float> got = RunGpu(batch, tile);
        ASSERT_EQ(got.size(), static_cast<size_t>(m * kN));
        const std::vector<float> row(got.begin() + pos * kN, got.begin() + (pos + 1) * kN);
        int64_t at = -1;
        EXPECT_EQ(BitMismatches(row, want, &at), 0)
            << "m " << m << " position " << pos << " tile " << static_cast<int>(tile)
            << " first mismatch " << at;
      }
    }
  }
}

// A grouped launch (padded, group-strided operands and outputs) gives every
// group the bits of its own launch, without and with a split of K.
TEST(Fp8BlockGemmTest, GroupsGiveEachGroupItsOwnBits) {
  constexpr int kGroups = 3;
  const int64_t m = 5, n = 96, k = 1024;
  const int64_t xs = m * k + 32, xss = m * (k / 32) + 4, ws = n * k + 64,
                wss = ((n + 31) / 32) * (k / 32) + 8, ys = m * n + 5;
  std::vector<uint8_t> x(kGroups * xs), x_scales(kGroups * xss), w(kGroups * ws),
      w_scales(kGroups * wss);
  std::vector<Operands> ops;
  for (int g = 0; g < kGroups; ++g) {
    ops.push_back(MakeOperands(m, n, k, 40 + g, Source::kQuantized));
    const Operands& op = ops.back();
    std::copy(op.x.begin(), op.x.end(), x.begin() + g * xs);
    std::copy(op.x_scales.begin(), op.x_scales.end(), x_scales.begin() + g * xss);
    std::copy(op.w.begin(), op.w.end(), w.begin() + g * ws);
    std::copy(op.w_scales.begin(), op.w_scales.end(), w_scales.begin() + g * wss);
  }
  DeviceBuffer<uint8_t> dx(x), dxs(x_scales), dw(w), dws(w_scales);
  DeviceBuffer<float> y(kGroups * ys), scratch(kGroups * 3 * m * n);
  DeviceBuffer<uint16_t> x16(kGroups * m * k);
  ASSERT_TRUE(dx.ok() && dxs.ok() && dw.ok() && dws.ok() && y.ok() && scratch.ok() && x16.ok());
  DeviceBuffer<uint32_t> counters(1 << 16);
  counters.Poison(0);
  const Fp8BlockGemmParams grouped{.x = dx.get(),
                                   .x_scales = dxs.get(),
                                   .w = dw.get(),
                                   .w_scales = dws.get(),
                                   .y = y.get(),
                                   .m = m,
                                   .n = n,
                                   .k = k,
                                   .groups = kGroups,
                                   .x_group_stride = xs,
                                   .x_scales_group_stride = xss,
                                   .w_group_stride = ws,
                                   .w_scales_group_stride = wss,
                                   .y_group_stride = ys};
  // Variants: split 1 or 3; -3: split 3 summed by the last split (counters);
  // x_shared: every group multiplies group 0's X (the decoder's shared w1 and
  // w3 over one input). Each group gets the bits of its own call, in either
  // math; kWgmma also on the tiles fed by TMA (3-D tensor maps over the
  // groups, X with one group when shared).
  struct MathTile {
    Fp8GemmMath math;
    Fp8GemmTile tile;
    bool panel = false;  // kN128M128Ws reading X from its f16 panel
  };
  for (const MathTile mt : {MathTile{Fp8GemmMath::kMmaF16, Fp8GemmTile::kAuto},
                            MathTile{Fp8GemmMath::kWgmma, Fp8GemmTile::kAuto},
                            MathTile{Fp8GemmMath::kWgmma, Fp8GemmTile::kN64M64},
                            MathTile{Fp8GemmMath::kWgmma, Fp8GemmTile::kN128M128Wg},
                            MathTile{Fp8GemmMath::kMmaF16, Fp8GemmTile::kN128M128Ws},
                            MathTile{Fp8GemmMath::kMmaF16, Fp8GemmTile::kN128M128Ws, true}}) {
    for (int variant : {1, 3, -3}) {
      for (bool x_shared : {false, true}) {
        const int splits = variant < 0 ? -variant : variant;
        y.Poison(0xFF);
        Fp8BlockGemmParams p = grouped;
        p.math = mt.math;
        p.tile = mt.tile;
        p.x_shared = x_shared;
        if (x_shared) p.x_group_stride = p.x_scales_group_stride = 0;
        p.k_splits = splits;
        p.split_scratch = splits > 1 ? scratch.get() : nullptr;
        p.split_counters = variant < 0 ? counters.get() : nullptr;
        p.split_counter_count = variant < 0 ? int64_t{1} << 16 : 0;
        if (mt.panel) {  // the panel packs the groups X has (one when shared)
          ASSERT_TRUE(WidenFp8ToF16Panel({.codes = dx.get(),
                                          .out = x16.get(),
                                          .rows = m,
                                          .k = k,
                                          .groups = x_shared ? 1 : kGroups,
                                          .code_group_stride = xs},
                                         nullptr)
                          .ok());
          p.x_f16 = x16.get();
        }
        ASSERT_TRUE(Fp8BlockGemm(p, nullptr).ok());
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        const std::vector<float> got = y.Download();
        for (int g = 0; g < kGroups; ++g) {
          Operands op = ops[g];
          if (x_shared) {
            op.x = ops[0].x;
            op.x_scales = ops[0].x_scales;
          }
          const std::vector<float> want =
              RunGpu(op, Fp8GemmTile::kAuto, Fp8GemmOutput::kF32, 0, splits, false, mt.math);
          ASSERT_EQ(want.size(), static_cast<size_t>(m * n));
          EXPECT_EQ(std::memcmp(got.data() + g * ys, want.data(), m * n * sizeof(float)), 0)
              << "group " << g << " splits " << splits << " x_shared " << x_shared << " tile "
              << static_cast<int>(mt.tile) << " panel " << mt.panel;
        }
      }
    }
  }
  // x_shared with an x stride is refused.
  Fp8BlockGemmParams shared_with_stride = grouped;
  shared_with_stride.x_shared = true;
  EXPECT_EQ(Fp8BlockGemm(shared_with_stride, nullptr).code(), absl::StatusCode::kInvalidArgument);
  // A stride below its group's size is refused.
  EXPECT_EQ(Fp8BlockGemm({.x = dx.get(), .x_scales = dxs.get(), .w = dw.get(),
                          .w_scales = dws.get(), .y = y.get(), .m = m, .n = n, .k = k,
                          .groups = kGroups, .w_group_stride = n * k - 16},
                         nullptr)
                .code(),
            absl::StatusCode::kInvalidArgument);
}

// Rows by group offsets (routed experts over their rows): every group's rows
// get the bits of a plain call on those rows with that group's weight, an
// empty group and a decreasing pair write nothing, rows past the last offset
// stay untouched; both maths, and the TMA-fed wgmma tile whose X boxes run
// past a group's rows into the next group's.
TEST(Fp8BlockGemmTest, GroupOffsetsGiveEachGroupItsRowsBits) {
  const int64_t m = 310, n = 96, k = 1024;
  const std::vector<int64_t> offsets = {0, 5, 5, 140, 300, 290};  // groups 1 and 4 empty
  const int groups = static_cast<int>(offsets.size()) - 1;
  const Operands rows = MakeOperands(m, n, k, 61, Source::kQuantized);
  std::vector<uint8_t> w, w_scales;
  std::vector<Operands> per_group;
  for (int g = 0; g < groups; ++g) {
    per_group.push_back(MakeOperands(1, n, k, 70 + g, Source::kQuantized));
    w.insert(w.end(), per_group.back().w.begin(), per_group.back().w.end());
    w_scales.insert(w_scales.end(), per_group.back().w_scales.begin(),
                    per_group.back().w_scales.end());
  }
  DeviceBuffer<uint8_t> dx(rows.x), dxs(rows.x_scales), dw(w), dws(w_scales);
  DeviceBuffer<int64_t> doff(offsets);
  DeviceBuffer<float> y(m * n);
  ASSERT_TRUE(dx.ok() && dxs.ok() && dw.ok() && dws.ok() && doff.ok() && y.ok());
  struct MathTile {
    Fp8GemmMath math;
    Fp8GemmTile tile;
  };
  for (const MathTile mt : {MathTile{Fp8GemmMath::kMmaF16, Fp8GemmTile::kAuto},
                            MathTile{Fp8GemmMath::kWgmma, Fp8GemmTile::kAuto},
                            MathTile{Fp8GemmMath::kWgmma, Fp8GemmTile::kN64M16},
                            MathTile{Fp8GemmMath::kWgmma, Fp8GemmTile::kN128M128Wg},
                            MathTile{Fp8GemmMath::kMmaF16, Fp8GemmTile::kN128M128Ws},
                            MathTile{Fp8GemmMath::kWgmmaF16, Fp8GemmTile::kN128M128Ws}}) {
    y.Poison(0xFF);
    const Fp8BlockGemmParams p{.x = dx.get(),
                               .x_scales = dxs.get(),
                               .w = dw.get(),
                               .w_scales = dws.get(),
                               .y = y.get(),
                               .m = m,
                               .n = n,
                               .k = k,
                               .tile = mt.tile,
                               .groups = groups,
                               .group_offsets = doff.get(),
                               .math = mt.math};
    ASSERT_TRUE(Fp8BlockGemm(p, nullptr).ok());
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const std::vector<float> got = y.Download();
    int64_t written_rows = 0;
    for (int g = 0; g < groups; ++g) {
      const int64_t begin = offsets[g], end = std::max(offsets[g], offsets[g + 1]);
      if (end == begin) continue;
      written_rows += end - begin;
      Operands op = per_group[g];
      op.m = end - begin;
      op.x.assign(rows.x.begin() + begin * k, rows.x.begin() + end * k);
      op.x_scales.assign(rows.x_scales.begin() + begin * (k / 32),
                         rows.x_scales.begin() + end * (k / 32));
      const std::vector<float> want =
          RunGpu(op, Fp8GemmTile::kAuto, Fp8GemmOutput::kF32, 0, 1, false, mt.math);
      ASSERT_EQ(want.size(), static_cast<size_t>(op.m * n));
      EXPECT_EQ(std::memcmp(got.data() + begin * n, want.data(), want.size() * sizeof(float)), 0)
          << "group " << g << " tile " << static_cast<int>(mt.tile);
    }
    EXPECT_EQ(written_rows, 300);
    for (int64_t i = 300 * n; i < m * n; ++i) {
      ASSERT_TRUE(std::isnan(got[i])) << "row " << i / n << " past the last group was written";
    }
  }
}

// Split-K (decode shapes of V4.1 and odd ones): within the bound, the same
// bits for every tile at a fixed split, a row's bits independent of the batch
// around it, and bf16 output the rounded fp32 output.
// A row alone and inside batches of `ms` other rows (in the middle), at the
// split its weight shape gets: the same bits.
void CheckARowIsBatchInvariantAtItsSplit(Fp8GemmMath math, uint32_t seed,
                                         std::initializer_list<int64_t> ms) {
  constexpr int64_t kN = 1280, kK = 5120;
  const int splits = ChooseFp8GemmSplits(kN, kK);
  ASSERT_GT(splits, 1);
  Operands alone = MakeOperands(1, kN, kK, seed, Source::kQuantized);
  const std::vector<float> want =
      RunGpu(alone, Fp8GemmTile::kAuto, Fp8GemmOutput::kF32, 0, splits, false, math);
  ASSERT_EQ(want.size(), static_cast<size_t>(kN));
  std::mt19937 rng(seed);
  for (int64_t m : ms) {
    Operands batch = alone;
    batch.m = m;
    QuantizedFp8Rows(m, kK, rng, batch.x, batch.x_scales);
    const int64_t pos = m / 2;
    std::copy(alone.x.begin(), alone.x.end(), batch.x.begin() + pos * kK);
    std::copy(alone.x_scales.begin(), alone.x_scales.end(),
              batch.x_scales.begin() + pos * (kK / 32));
    const std::vector<float> got =
        RunGpu(batch, Fp8GemmTile::kAuto, Fp8GemmOutput::kF32, 0, splits, false, math);
    ASSERT_EQ(got.size(), static_cast<size_t>(m * kN));
    const std::vector<float> row(got.begin() + pos * kN, got.begin() + (pos + 1) * kN);
    EXPECT_EQ(BitMismatches(row, want, nullptr), 0) << "m " << m;
  }
}

TEST(Fp8BlockGemmTest, SplitKIsBoundedTileFreeAndBatchInvariant) {
  for (const Shape& s : {Shape{1, 1280, 5120}, Shape{5, 512, 5120}, Shape{64, 130, 1280},
                         Shape{3, 33, 416}, Shape{17, 1024, 2304}}) {
    const int64_t num_kt = (s.k + 127) / 128;
    for (int splits : {2, 3, 7, ChooseFp8GemmSplits(s.n, s.k)}) {
      if (splits > num_kt) continue;
      const Operands op = MakeOperands(s.m, s.n, s.k, 3 * s.m + s.n + splits, Source::kRawCodes);
      const std::vector<float> first =
          RunGpu(op, kAllFp8GemmTiles[0], Fp8GemmOutput::kF32, 0, splits);
      ASSERT_EQ(first.size(), static_cast<size_t>(s.m * s.n)) << "splits " << splits;
      const Agreement a = Compare(op, first, splits);
      EXPECT_EQ(a.violations, 0) << s.m << "x" << s.n << "x" << s.k << " splits " << splits;
      std::printf("split %d m %-3lld n %-5lld k %-5lld: worst |y - exact| / sum|xw| = %.3g\n",
                  splits, static_cast<long long>(s.m), static_cast<long long>(s.n),
                  static_cast<long long>(s.k), a.worst_ratio);
      for (Fp8GemmTile tile : kAllFp8GemmTiles) {
        for (bool fused : {false, true}) {
          int64_t at = -1;
          EXPECT_EQ(
              BitMismatches(RunGpu(op, tile, Fp8GemmOutput::kF32, 0, splits, fused), first, &at), 0)
              << "tile " << static_cast<int>(tile) << " splits " << splits << " fused " << fused
              << " first mismatch " << at;
        }
      }
      // The register path for scales (misaligned) keeps the bits too.
      EXPECT_EQ(BitMismatches(RunGpu(op, Fp8GemmTile::kAuto, Fp8GemmOutput::kF32, 1, splits),
                              first, nullptr),
                0)
          << "register scales, splits " << splits;
      const std::vector<float> bf16 =
          RunGpu(op, Fp8GemmTile::kAuto, Fp8GemmOutput::kBf16, 0, splits);
      ASSERT_EQ(bf16.size(), first.size());
      std::vector<float> rounded(first.size());
      for (size_t i = 0; i < first.size(); ++i) {
        rounded[i] = RoundToBf16(first[i]);
      }
      EXPECT_EQ(BitMismatches(bf16, rounded, nullptr), 0) << "bf16, splits " << splits;
      EXPECT_EQ(BitMismatches(RunGpu(op, Fp8GemmTile::kAuto, Fp8GemmOutput::kBf16, 0, splits,
                                     /*fused=*/true),
                              rounded, nullptr),
                0)
          << "bf16 fused, splits " << splits;
      // fp32 rounded in the epilogue (or the split's reduction): the bits a
      // separate RoundBf16 pass over the fp32 result gives.
      EXPECT_EQ(
          BitMismatches(RunGpu(op, Fp8GemmTile::kAuto, Fp8GemmOutput::kF32RoundedBf16, 0, splits),
                        rounded, nullptr),
          0)
          << "fp32 rounded to bf16, splits " << splits;
      EXPECT_EQ(BitMismatches(RunGpu(op, Fp8GemmTile::kAuto, Fp8GemmOutput::kF32RoundedBf16, 0,
                                     splits, /*fused=*/true),
                              rounded, nullptr),
                0)
          << "fp32 rounded to bf16 fused, splits " << splits;
    }
  }
  CheckARowIsBatchInvariantAtItsSplit(Fp8GemmMath::kMmaF16, 77, {8, 64, 200});
}

// The tiles that run the wgmma maths, and the shapes their tests take (one
// row to 300, n and k not multiples of the tiles).
std::vector<Fp8GemmTile> WgmmaTiles() {
  std::vector<Fp8GemmTile> tiles;
  for (Fp8GemmTile t : kFp8GemmTiles) {
    if (Fp8GemmTileRunsWgmma(ShapeOfFp8GemmTile(t))) tiles.push_back(t);
  }
  return tiles;
}
constexpr Shape kWgmmaShapes[] = {{1, 1280, 5120}, {7, 100, 160},   {13, 257, 1056},
                                  {33, 96, 2304},  {64, 130, 1280}, {300, 257, 1024}};

// Fp8GemmMath::kWgmma: within its bound of the exact product, the same bits
// on every tile that runs it, with both scale paths, with a split (fused or
// not), and for a row alone or inside batches.
TEST(Fp8BlockGemmTest, WgmmaIsBoundedTileFreeAndBatchInvariant) {
  constexpr Fp8GemmMath kW = Fp8GemmMath::kWgmma;
  const std::vector<Fp8GemmTile> tiles = WgmmaTiles();
  ASSERT_EQ(tiles.size(), 8u);  // kN64M8 with three ring depths
  for (const Shape& s : kWgmmaShapes) {
    const int64_t num_kt = (s.k + 127) / 128;
    for (int splits : {1, 3, ChooseFp8GemmSplits(s.n, s.k)}) {
      if (splits > num_kt) continue;
      const Operands op = MakeOperands(s.m, s.n, s.k, 11 * s.m + s.n + splits, Source::kRawCodes);
      const std::vector<float> first =
          RunGpu(op, Fp8GemmTile::kAuto, Fp8GemmOutput::kF32, 0, splits, false, kW);
      ASSERT_EQ(first.size(), static_cast<size_t>(s.m * s.n));
      const Agreement a = Compare(op, first, splits, kW);
      EXPECT_EQ(a.violations, 0) << s.m << "x" << s.n << "x" << s.k << " splits " << splits;
      std::printf("wgmma split %d m %-3lld n %-5lld k %-5lld: worst |y - exact| / sum|xw| = %.3g\n",
                  splits, static_cast<long long>(s.m), static_cast<long long>(s.n),
                  static_cast<long long>(s.k), a.worst_ratio);
      for (Fp8GemmTile tile : tiles) {
        for (bool fused : {false, true}) {
          int64_t at = -1;
          EXPECT_EQ(BitMismatches(RunGpu(op, tile, Fp8GemmOutput::kF32, 0, splits, fused, kW),
                                  first, &at),
                    0)
              << "tile " << static_cast<int>(tile) << " splits " << splits << " fused " << fused
              << " first mismatch " << at;
        }
      }
      EXPECT_EQ(
          BitMismatches(RunGpu(op, Fp8GemmTile::kAuto, Fp8GemmOutput::kF32, 1, splits, false, kW),
                        first, nullptr),
          0)
          << "register scales, splits " << splits;
    }
  }
  CheckARowIsBatchInvariantAtItsSplit(kW, 78, {8, 31, 64, 200});
}

// Fp8GemmMath::kWgmmaF16: kMmaF16's bits on every tile that runs wgmma
// (the wgmma-only prefill tile kN128M128Wg included), with both scale paths
// and with a split (fused or not), so the two maths may share a step
// (tensor_core_sum_probe_test: f16 wgmma sums as the mma.sync pair does).
TEST(Fp8BlockGemmTest, WgmmaF16GivesTheMmaBitsOnEveryTile) {
  constexpr Fp8GemmMath kF = Fp8GemmMath::kWgmmaF16;
  const std::vector<Fp8GemmTile> tiles = WgmmaTiles();
  ASSERT_EQ(tiles.size(), 8u);  // kN64M8 with three ring depths
  for (const Shape& s : kWgmmaShapes) {
    const int64_t num_kt = (s.k + 127) / 128;
    for (int splits : {1, 3, ChooseFp8GemmSplits(s.n, s.k)}) {
      if (splits > num_kt) continue;
      for (Source source : {Source::kRawCodes, Source::kQuantized}) {
        const Operands op = MakeOperands(s.m, s.n, s.k, 13 * s.m + s.n + splits, source);
        const std::vector<float> mma = RunGpu(op, Fp8GemmTile::kAuto, Fp8GemmOutput::kF32, 0,
                                              splits, false, Fp8GemmMath::kMmaF16);
        ASSERT_EQ(mma.size(), static_cast<size_t>(s.m * s.n));
        for (Fp8GemmTile tile : tiles) {
          for (bool fused : {false, true}) {
            int64_t at = -1;
            EXPECT_EQ(BitMismatches(RunGpu(op, tile, Fp8GemmOutput::kF32, 0, splits, fused, kF),
                                    mma, &at),
                      0)
                << s.m << "x" << s.n << "x" << s.k << " tile " << static_cast<int>(tile)
                << " splits " << splits << " fused " << fused << " first mismatch " << at;
          }
        }
        EXPECT_EQ(
            BitMismatches(RunGpu(op, Fp8GemmTile::kAuto, Fp8GemmOutput::kF32, 1, splits, false, kF),
                          mma, nullptr),
            0)
            << "register scales, splits " << splits;
      }
    }
  }
  CheckARowIsBatchInvariantAtItsSplit(kF, 79, {8, 31, 64, 200});
}

// X's two f16 panels for CheckWsGroupOffsets' forms: the plain one and the
// scaled one (x_f16_scaled).
struct WsPanels {
  const uint16_t* plain = nullptr;
  const uint16_t* scaled = nullptr;
};
struct WsGroupSeeds {
  uint32_t counts, rows, weights;  // the weights of group g: weights + g
};

// Rows by group offsets on kN128M128Ws's compact grid (row tiles numbered
// over the groups in order): `groups` groups of 0 - 300 rows (a full tile,
// empty groups and one a row past a tile among them), each group's rows
// against `reference` run on those rows alone with that group's weight, in
// `math`. `forms` products are checked; `form(i, panels, p)` sets the i-th
// one's options.
void CheckWsGroupOffsets(
    int groups, WsGroupSeeds seeds, Fp8GemmMath math, Fp8GemmTile reference, int forms,
    const std::function<void(int, const WsPanels&, Fp8BlockGemmParams&)>& form) {
  constexpr int64_t kN = 160, kK = 512;
  std::mt19937 rng(seeds.counts);
  std::uniform_int_distribution<int> count(0, 300);
  std::vector<int64_t> offsets = {0};
  for (int g = 0; g < groups; ++g) {
    const int c = g % 5 == 0 ? (g == 0 ? 128 : 0) : g == 7 ? 129 : count(rng);
    offsets.push_back(offsets.back() + c);
  }
  const int64_t m = offsets.back();
  const Operands rows = MakeOperands(m, kN, kK, seeds.rows, Source::kQuantized);
  std::vector<uint8_t> w, w_scales;
  std::vector<Operands> per_group;
  for (int g = 0; g < groups; ++g) {
    per_group.push_back(MakeOperands(1, kN, kK, seeds.weights + g, Source::kRawCodes));
    w.insert(w.end(), per_group.back().w.begin(), per_group.back().w.end());
    w_scales.insert(w_scales.end(), per_group.back().w_scales.begin(),
                    per_group.back().w_scales.end());
  }
  DeviceBuffer<uint8_t> dx(rows.x), dxs(rows.x_scales), dw(w), dws(w_scales);
  DeviceBuffer<int64_t> doff(offsets);
  DeviceBuffer<float> y(m * kN);
  DeviceBuffer<uint16_t> x16(m * kK), x16s(m * kK);
  ASSERT_TRUE(dx.ok() && dxs.ok() && dw.ok() && dws.ok() && doff.ok() && y.ok() && x16.ok() &&
              x16s.ok());
  ASSERT_TRUE(
      WidenFp8ToF16Panel({.codes = dx.get(), .out = x16.get(), .rows = m, .k = kK}, nullptr).ok());
  ASSERT_TRUE(
      WidenFp8ToF16Panel(
          {.codes = dx.get(), .out = x16s.get(), .rows = m, .k = kK, .scales = dxs.get()}, nullptr)
          .ok());
  for (int f = 0; f < forms; ++f) {
    y.Poison(0xFF);
    Fp8BlockGemmParams p{.x = dx.get(),
                         .x_scales = dxs.get(),
                         .w = dw.get(),
                         .w_scales = dws.get(),
                         .y = y.get(),
                         .m = m,
                         .n = kN,
                         .k = kK,
                         .tile = Fp8GemmTile::kN128M128Ws,
                         .groups = groups,
                         .group_offsets = doff.get(),
                         .math = math};
    form(f, {.plain = x16.get(), .scaled = x16s.get()}, p);
    ASSERT_TRUE(Fp8BlockGemm(p, nullptr).ok());
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const std::vector<float> got = y.Download();
    for (int g = 0; g < groups; ++g) {
      const int64_t begin = offsets[g], end = offsets[g + 1];
      if (end == begin) continue;
      Operands op = per_group[g];
      op.m = end - begin;
      op.x.assign(rows.x.begin() + begin * kK, rows.x.begin() + end * kK);
      op.x_scales.assign(rows.x_scales.begin() + begin * (kK / 32),
                         rows.x_scales.begin() + end * (kK / 32));
      const std::vector<float> want = RunGpu(op, reference, Fp8GemmOutput::kF32, 0, 1, false, math);
      ASSERT_EQ(want.size(), static_cast<size_t>(op.m * kN));
      EXPECT_EQ(std::memcmp(got.data() + begin * kN, want.data(), want.size() * sizeof(float)), 0)
          << "group " << g << " rows " << op.m << " form " << f;
    }
  }
}

// A row alone (a decode tile, kAuto) against the same row at the start,
// middle and end of a 2,048-row batch (kAuto: kN128M128Ws), in `math`.
void CheckARowAloneAndInAPrefillBatch(Fp8GemmMath math, uint32_t seed, uint32_t batch_seed) {
  constexpr int64_t kN = 1024, kK = 2048;
  const Operands alone = MakeOperands(1, kN, kK, seed, Source::kQuantized);
  const std::vector<float> want =
      RunGpu(alone, Fp8GemmTile::kAuto, Fp8GemmOutput::kF32, 0, 1, false, math);
  std::mt19937 rng(batch_seed);
  Operands batch = alone;
  batch.m = 2048;
  QuantizedFp8Rows(batch.m, kK, rng, batch.x, batch.x_scales);
  for (int64_t pos : {int64_t{0}, int64_t{1337}, batch.m - 1}) {
    Operands b = batch;
    std::copy(alone.x.begin(), alone.x.end(), b.x.begin() + pos * kK);
    std::copy(alone.x_scales.begin(), alone.x_scales.end(), b.x_scales.begin() + pos * (kK / 32));
    const std::vector<float> got =
        RunGpu(b, Fp8GemmTile::kAuto, Fp8GemmOutput::kF32, 0, 1, false, math);
    ASSERT_EQ(got.size(), static_cast<size_t>(b.m * kN));
    const std::vector<float> row(got.begin() + pos * kN, got.begin() + (pos + 1) * kN);
    EXPECT_EQ(BitMismatches(row, want, nullptr), 0) << "position " << pos;
  }
}

// kN128M128Ws, the warp-specialized prefill tile: kMmaF16's bits (the mma
// tile kN128M128 is the witness) in both maths it runs, every output form,
// with and without a split, rows and columns that leave partial tiles, the
// automatic tile above 256 rows, and a row alone against the same row in a
// prefill-sized batch; refused where it does not apply.
TEST(Fp8BlockGemmTest, WarpSpecializedTileGivesTheMmaBits) {
  constexpr Fp8GemmTile kWs = Fp8GemmTile::kN128M128Ws;
  for (const Shape& s :
       {Shape{1, 64, 128}, Shape{130, 257, 1024}, Shape{300, 1280, 5120}, Shape{1030, 512, 1280}}) {
    const int64_t num_kt = s.k / 128;
    for (Source source : {Source::kRawCodes, Source::kQuantized}) {
      const Operands op = MakeOperands(s.m, s.n, s.k, 7 * s.m + s.n, source);
      for (int splits : {1, 3}) {
        if (splits > num_kt) continue;
        for (Fp8GemmOutput output :
             {Fp8GemmOutput::kF32, Fp8GemmOutput::kBf16, Fp8GemmOutput::kF32RoundedBf16}) {
          const std::vector<float> mma = RunGpu(op, Fp8GemmTile::kN128M128, output, 0, splits);
          ASSERT_EQ(mma.size(), static_cast<size_t>(s.m * s.n));
          if (output == Fp8GemmOutput::kF32 && s.m * s.n * s.k < (int64_t{1} << 30)) {
            EXPECT_EQ(Compare(op, mma, splits).violations, 0);
          }
          for (Fp8GemmMath math : {Fp8GemmMath::kMmaF16, Fp8GemmMath::kWgmmaF16}) {
            // X widened in the CTA / from the f16 panel / from the scaled panel.
            for (int form = 0; form < 3; ++form) {
              const bool panel = form > 0, scaled = form == 2;
              for (bool halves : {false, true}) {  // Fp8BlockGemmParams::ws_halves
                if (scaled && halves) continue;
                int64_t at = -1;
                EXPECT_EQ(BitMismatches(RunGpu(op, kWs, output, 0, splits, false, math, panel,
                                               nullptr, halves, scaled),
                                        mma, &at),
                          0)
                    << s.m << "x" << s.n << "x" << s.k << " splits " << splits << " output "
                    << static_cast<int>(output) << " math " << static_cast<int>(math) << " panel "
                    << panel << " scaled " << scaled << " halves " << halves << " first mismatch "
                    << at;
              }
            }
          }
        }
      }
    }
  }
  // Scale products that are subnormal in valid rows: the bits stay the mma
  // tile's.
  {
    constexpr int64_t kM = 300, kN = 256, kK = 1024;
    Operands op = MakeOperands(kM, kN, kK, 4242, Source::kRawCodes);
    op.x_scales[5 * (kK / 32) + 3] = 0;     // 2^-127
    op.x_scales[200 * (kK / 32) + 17] = 1;  // 2^-126
    op.w_scales[1 * (kK / 32) + 30] = 2;    // 2^-125
    const std::vector<float> mma = RunGpu(op, Fp8GemmTile::kN128M128);
    for (int form = 0; form < 5; ++form) {
      const bool panel = form >= 2, halves = form % 2 == 1 && form < 4, scaled = form == 4;
      int64_t at = -1;
      EXPECT_EQ(BitMismatches(RunGpu(op, kWs, Fp8GemmOutput::kF32, 0, 1, false,
                                     Fp8GemmMath::kMmaF16, panel, nullptr, halves, scaled),
                              mma, &at),
                0)
          << "tiny scales, panel " << panel << " halves " << halves << " scaled " << scaled
          << " first mismatch " << at;
    }
  }
  // Rows by group offsets on the compact grid: 20 groups, each group's rows
  // the bits of the mma tile on those rows with that group's weight, X
  // widened in the CTA, from the panel, with halves, and from the scaled panel.
  CheckWsGroupOffsets(20, {77, 91, 200}, Fp8GemmMath::kMmaF16, Fp8GemmTile::kN128M128, 5,
                      [](int form, const WsPanels& panels, Fp8BlockGemmParams& p) {
                        const bool panel = (form & 1) != 0 || form == 4, scaled = form == 4;
                        p.x_f16 = scaled ? panels.scaled : panel ? panels.plain : nullptr;
                        p.x_f16_scaled = scaled;
                        p.ws_halves = (form & 2) != 0;
                      });
  // kAuto takes it above 256 rows where it applies, and not elsewhere.
  const Fp8BlockGemmParams big{.x_scales = reinterpret_cast<const uint8_t*>(uintptr_t{256}),
                               .w_scales = reinterpret_cast<const uint8_t*>(uintptr_t{512}),
                               .m = 4096,
                               .n = 1280,
                               .k = 5120};
  EXPECT_EQ(ResolveFp8GemmTile(big), kWs);
  Fp8BlockGemmParams other = big;
  other.math = Fp8GemmMath::kWgmma;
  EXPECT_EQ(ResolveFp8GemmTile(other), kWs);
  other = big;
  other.k = 5120 + 32;
  EXPECT_EQ(ResolveFp8GemmTile(other), Fp8GemmTile::kN128M128);
  other = big;
  other.x_scales += 1;
  EXPECT_EQ(ResolveFp8GemmTile(other), Fp8GemmTile::kN128M128);
  other = big;
  other.m = 256;
  EXPECT_NE(ResolveFp8GemmTile(other), kWs);
  // A row alone and in a prefill batch (the automatic tile: the mma tiles
  // alone, kN128M128Ws in the batch).
  CheckARowAloneAndInAPrefillBatch(Fp8GemmMath::kMmaF16, 123, 9);
  // Refused: K not a multiple of 128, scales not 4-byte aligned.
  DeviceBuffer<uint8_t> buf(1 << 16);
  ASSERT_TRUE(buf.ok());
  uint8_t* d = buf.get();
  const Fp8BlockGemmParams good{
      .x = d, .x_scales = d, .w = d, .w_scales = d, .y = d, .m = 2, .n = 32, .k = 128, .tile = kWs};
  EXPECT_TRUE(Fp8BlockGemm(good, nullptr).ok());
  using P = Fp8BlockGemmParams;
  EXPECT_TRUE(EachIsInvalidArgument(good,
                                    [](const P& p) { return Fp8BlockGemm(p, nullptr).code(); },
                                    {
                                        [](P& p) { p.k = 96; },
                                        [&](P& p) { p.x_scales = d + 1; },
                                    }));
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

// kN128M128Ws in Fp8GemmMath::kWgmma (e4m3 wgmma on the codes): the bits of
// kN128M128Wg, the non-specialized e4m3 prefill tile, in every output form,
// with and without a split, with a panel passed (not read), partial tiles,
// subnormal scale products, rows by group offsets on the compact grid, and a
// row alone (a decode tile) against the same row in a prefill-sized batch.
TEST(Fp8BlockGemmTest, WarpSpecializedTileGivesTheWgmmaBits) {
  constexpr Fp8GemmTile kWs = Fp8GemmTile::kN128M128Ws;
  constexpr Fp8GemmMath kW = Fp8GemmMath::kWgmma;
  for (const Shape& s : {Shape{1, 64, 128}, Shape{130, 257, 1024}, Shape{300, 1280, 5120},
                         Shape{1030, 512, 1280}, Shape{700, 384, 2816}}) {
    const int64_t num_kt = s.k / 128;
    for (Source source : {Source::kRawCodes, Source::kQuantized}) {
      const Operands op = MakeOperands(s.m, s.n, s.k, 5 * s.m + s.n, source);
      for (int splits : {1, 3}) {
        if (splits > num_kt) continue;
        for (Fp8GemmOutput output :
             {Fp8GemmOutput::kF32, Fp8GemmOutput::kBf16, Fp8GemmOutput::kF32RoundedBf16}) {
          const std::vector<float> want =
              RunGpu(op, Fp8GemmTile::kN128M128Wg, output, 0, splits, false, kW);
          ASSERT_EQ(want.size(), static_cast<size_t>(s.m * s.n));
          if (output == Fp8GemmOutput::kF32 && s.m * s.n * s.k < (int64_t{1} << 30)) {
            EXPECT_EQ(Compare(op, want, splits, kW).violations, 0);
          }
          for (bool panel : {false, true}) {
            int64_t at = -1;
            EXPECT_EQ(
                BitMismatches(RunGpu(op, kWs, output, 0, splits, false, kW, panel), want, &at), 0)
                << s.m << "x" << s.n << "x" << s.k << " splits " << splits << " output "
                << static_cast<int>(output) << " panel " << panel << " first mismatch " << at;
          }
        }
      }
    }
  }
  {
    constexpr int64_t kM = 300, kN = 256, kK = 1024;
    Operands op = MakeOperands(kM, kN, kK, 4343, Source::kRawCodes);
    op.x_scales[5 * (kK / 32) + 3] = 0;     // 2^-127
    op.x_scales[200 * (kK / 32) + 17] = 1;  // 2^-126
    op.w_scales[1 * (kK / 32) + 30] = 2;    // 2^-125
    op.x_scales[7 * (kK / 32) + 9] = 0xFF;  // NaN
    const std::vector<float> want =
        RunGpu(op, Fp8GemmTile::kN128M128Wg, Fp8GemmOutput::kF32, 0, 1, false, kW);
    int64_t at = -1;
    EXPECT_EQ(BitMismatches(RunGpu(op, kWs, Fp8GemmOutput::kF32, 0, 1, false, kW), want, &at), 0)
        << "tiny and NaN scales, first mismatch " << at;
  }
  CheckWsGroupOffsets(12, {78, 92, 300}, kW, Fp8GemmTile::kN128M128Wg, 1,
                      [](int, const WsPanels&, Fp8BlockGemmParams&) {});
  CheckARowAloneAndInAPrefillBatch(kW, 124, 10);
}

// The scaled panel (Fp8BlockGemmParams::x_f16_scaled) against the mma tile,
// bit for bit: stages whose rows are all in range (one fold factor a warp),
// many of them small enough that the panel holds f16 subnormals; rows just
// out of range on either side (the table, with sw 2^-6 and sw sx entries
// side by side); a weight scale whose products overflow, and a NaN one.
TEST(Fp8BlockGemmTest, ScaledPanelGivesTheMmaBits) {
  constexpr Fp8GemmTile kWs = Fp8GemmTile::kN128M128Ws;
  constexpr int64_t kM = 300, kN = 384, kK = 1024;
  std::mt19937 rng(606);
  // Bytes in range, a third of them at the bottom binades (subnormal f16).
  std::uniform_int_distribution<int> low(kFp8PanelScaleMinByte, kFp8PanelScaleMinByte + 9),
      any(kFp8PanelScaleMinByte, kFp8PanelScaleMaxByte), pick(0, 2);
  Operands base = MakeOperands(kM, kN, kK, 31337, Source::kRawCodes);
  for (auto& b : base.x_scales) b = static_cast<uint8_t>(pick(rng) == 0 ? low(rng) : any(rng));
  struct Case {
    const char* name;
    std::function<void(Operands&)> edit;
  };
  const std::vector<Case> cases = {
      {"all in range", [](Operands&) {}},
      {"a row above the range",
       [](Operands& op) { op.x_scales[7 * (kK / 32) + 9] = kFp8PanelScaleMaxByte + 1; }},
      {"a row below the range",
       [](Operands& op) { op.x_scales[290 * (kK / 32) + 30] = kFp8PanelScaleMinByte - 1; }},
      {"zero and NaN activation scales",
       [](Operands& op) {
         op.x_scales[3 * (kK / 32) + 1] = 0;
         op.x_scales[140 * (kK / 32) + 2] = 0xFF;
       }},
      {"an overflowing and a NaN weight scale",
       [](Operands& op) {
         for (int64_t r = 0; r < kM; ++r) op.x_scales[r * (kK / 32) + 5] = kFp8PanelScaleMaxByte;
         op.w_scales[1 * (kK / 32) + 5] = 254;
         op.w_scales[7 * (kK / 32) + 12] = 0xFF;
       }},
  };
  for (const Case& c : cases) {
    Operands op = base;
    c.edit(op);
    const std::vector<float> mma = RunGpu(op, Fp8GemmTile::kN128M128);
    ASSERT_EQ(mma.size(), static_cast<size_t>(kM * kN));
    for (int splits : {1, 3}) {
      for (Fp8GemmMath math : {Fp8GemmMath::kMmaF16, Fp8GemmMath::kWgmmaF16}) {
        int64_t at = -1;
        const std::vector<float> got = RunGpu(op, kWs, Fp8GemmOutput::kF32, 0, splits, false, math,
                                              true, nullptr, false, true);
        const std::vector<float> want =
            splits == 1 ? mma : RunGpu(op, Fp8GemmTile::kN128M128, Fp8GemmOutput::kF32, 0, splits);
        EXPECT_EQ(BitMismatches(got, want, &at), 0)
            << c.name << ", splits " << splits << ", math " << static_cast<int>(math)
            << ", first mismatch " << at;
      }
    }
  }
  // x_f16_scaled needs the panel and no halves.
  DeviceBuffer<uint8_t> buf(1 << 16);
  ASSERT_TRUE(buf.ok());
  uint8_t* d = buf.get();
  const Fp8BlockGemmParams good{.x = d,
                                .x_scales = d,
                                .w = d,
                                .w_scales = d,
                                .y = d,
                                .m = 2,
                                .n = 32,
                                .k = 128,
                                .tile = kWs,
                                .x_f16 = reinterpret_cast<const uint16_t*>(d),
                                .x_f16_scaled = true};
  using P = Fp8BlockGemmParams;
  EXPECT_TRUE(EachIsInvalidArgument(good,
                                    [](const P& p) { return Fp8BlockGemm(p, nullptr).code(); },
                                    {
                                        [](P& p) { p.x_f16 = nullptr; },
                                        [](P& p) { p.ws_halves = true; },
                                    }));
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

float F16BitsToFloat(uint16_t h) {
  const int sign = h >> 15, e = (h >> 10) & 31, f = h & 1023;
  const float mag = e == 0    ? std::ldexp(static_cast<float>(f), -24)
                    : e == 31 ? (f != 0 ? std::numeric_limits<float>::quiet_NaN()
                                        : std::numeric_limits<float>::infinity())
                              : std::ldexp(static_cast<float>(f + 1024), e - 25);
  return sign != 0 ? -mag : mag;
}

// Every e4m3 code (NaN ones too) in two groups with a padded stride: the
// panel holds its f16 value at Fp8GemmF16PanelColumn's place of its row.
TEST(Fp8BlockGemmTest, F16PanelHoldsEveryCodeAtItsColumn) {
  constexpr int64_t kRows = 37, kK = 256, kStride = kRows * kK + 48;
  constexpr int kGroups = 2;
  std::vector<uint8_t> codes(kGroups * kStride);
  std::mt19937 rng(5);
  for (size_t i = 0; i < codes.size(); ++i) codes[i] = static_cast<uint8_t>(i < 256 ? i : rng());
  DeviceBuffer<uint8_t> dc(codes);
  DeviceBuffer<uint16_t> out(kGroups * kRows * kK);
  ASSERT_TRUE(dc.ok() && out.ok());
  out.Poison(0xAB);
  const absl::Status s = WidenFp8ToF16Panel({.codes = dc.get(),
                                             .out = out.get(),
                                             .rows = kRows,
                                             .k = kK,
                                             .groups = kGroups,
                                             .code_group_stride = kStride},
                                            nullptr);
  ASSERT_TRUE(s.ok()) << s;
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<uint16_t> got = out.Download();
  int64_t wrong = 0;
  for (int g = 0; g < kGroups; ++g) {
    for (int64_t r = 0; r < kRows; ++r) {
      for (int64_t k = 0; k < kK; ++k) {
        const float want = E4m3ToFloat(codes[g * kStride + r * kK + k]);
        const float have = F16BitsToFloat(got[(g * kRows + r) * kK + Fp8GemmF16PanelColumn(k)]);
        const bool same =
            std::isnan(want) ? std::isnan(have) : std::memcmp(&want, &have, sizeof(float)) == 0;
        wrong += same ? 0 : 1;
      }
    }
  }
  EXPECT_EQ(wrong, 0);
  // With scales: a block whose byte is in range holds code x 2^(e + 6),
  // exactly (subnormal f16 at the bottom), the others the plain codes.
  const int64_t scale_stride = kRows * (kK / 32) + 5;
  std::vector<uint8_t> scales(kGroups * scale_stride);
  std::uniform_int_distribution<int> near(kFp8PanelScaleMinByte - 3, kFp8PanelScaleMaxByte + 3);
  for (auto& b : scales) b = static_cast<uint8_t>(near(rng));
  scales[0] = 0;
  scales[1] = 0xFF;
  DeviceBuffer<uint8_t> ds(scales);
  ASSERT_TRUE(ds.ok());
  out.Poison(0xAB);
  const absl::Status scaled = WidenFp8ToF16Panel({.codes = dc.get(),
                                                  .out = out.get(),
                                                  .rows = kRows,
                                                  .k = kK,
                                                  .groups = kGroups,
                                                  .code_group_stride = kStride,
                                                  .scales = ds.get(),
                                                  .scale_group_stride = scale_stride},
                                                 nullptr);
  ASSERT_TRUE(scaled.ok()) << scaled;
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<uint16_t> got_scaled = out.Download();
  wrong = 0;
  int64_t subnormal = 0;
  for (int g = 0; g < kGroups; ++g) {
    for (int64_t r = 0; r < kRows; ++r) {
      for (int64_t k = 0; k < kK; ++k) {
        const int byte = scales[g * scale_stride + r * (kK / 32) + k / 32];
        float want = E4m3ToFloat(codes[g * kStride + r * kK + k]);
        if (Fp8PanelScaleInRange(byte)) want = std::ldexp(want, byte - 127 + kFp8PanelScaleShift);
        const uint16_t bits = got_scaled[(g * kRows + r) * kK + Fp8GemmF16PanelColumn(k)];
        const float have = F16BitsToFloat(bits);
        const bool same =
            std::isnan(want) ? std::isnan(have) : std::memcmp(&want, &have, sizeof(float)) == 0;
        wrong += same ? 0 : 1;
        subnormal += (bits & 0x7C00) == 0 && (bits & 0x3FF) != 0 ? 1 : 0;
      }
    }
  }
  EXPECT_EQ(wrong, 0);
  EXPECT_GT(subnormal, 0);
  EXPECT_EQ(
      WidenFp8ToF16Panel({.codes = dc.get(), .out = out.get(), .rows = kRows, .k = 24}, nullptr)
          .code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(WidenFp8ToF16Panel(
                {.codes = dc.get(), .out = out.get(), .rows = kRows, .k = 48, .scales = ds.get()},
                nullptr)
                .code(),
            absl::StatusCode::kInvalidArgument);
}

// A RoPE in the split-K reduce (Fp8BlockGemmParams::rope, the decoder's
// query): the product's bits, then ApplyRope's (by-position table, a position
// past it giving NaN in its rotated dims), rounded or not, with the last-CTA
// sum asked for too (a RoPE turns it off); without a split there is no second
// kernel and the RoPE is ignored (Fp8GemmRopeApplies false).
TEST(Fp8BlockGemmTest, RopeInTheSplitReduceGivesApplyRopeAfterTheProduct) {
  constexpr int64_t kM = 3, kHeads = 4, kHeadDim = 128, kRows = 16;
  const int64_t n = kHeads * kHeadDim, k = 1024;
  const Operands op = MakeOperands(kM, n, k, 77, Source::kQuantized);
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  std::vector<float> table(kRows * 64);
  for (float& v : table) v = unit(rng);
  const std::vector<int64_t> positions = {2, kRows - 1, kRows + 24};
  DeviceBuffer<float> d_table(table);
  DeviceBuffer<int64_t> d_pos(positions);
  for (const Fp8GemmOutput output : {Fp8GemmOutput::kF32, Fp8GemmOutput::kF32RoundedBf16}) {
    const bool round = output == Fp8GemmOutput::kF32RoundedBf16;
    const Fp8BlockGemmParams::Rope rope{.positions = d_pos.get(),
                                        .cos_sin = d_table.get(),
                                        .cos_sin_rows = kRows,
                                        .head_dim = static_cast<int>(kHeadDim),
                                        .dim = 64,
                                        .round_bf16 = round};
    for (const int splits : {1, 3}) {
      for (const bool fused : {false, true}) {
        const std::vector<float> plain = RunGpu(op, Fp8GemmTile::kAuto, output, 0, splits);
        ASSERT_EQ(plain.size(), static_cast<size_t>(kM * n));
        DeviceBuffer<float> roped(plain);
        ASSERT_TRUE(ApplyRope({.x = roped.get(),
                               .positions = d_pos.get(),
                               .cos_sin = d_table.get(),
                               .num_tokens = kM,
                               .num_heads = static_cast<int>(kHeads),
                               .head_dim = static_cast<int>(kHeadDim),
                               .rope_dim = 64,
                               .cos_sin_by_position = true,
                               .cos_sin_rows = kRows,
                               .round_bf16 = round},
                              nullptr)
                        .ok());
        const std::vector<float> got = RunGpu(op, Fp8GemmTile::kAuto, output, 0, splits, fused,
                                              Fp8GemmMath::kMmaF16, false, &rope);
        Fp8BlockGemmParams asked{.m = kM, .n = n, .k = k, .output = output, .k_splits = splits};
        asked.rope = rope;
        const bool applies = Fp8GemmRopeApplies(asked);
        EXPECT_EQ(applies, splits > 1);
        int64_t at = -1;
        EXPECT_EQ(BitMismatches(got, applies ? roped.Download() : plain, &at), 0)
            << "splits " << splits << " fused " << fused << " round " << round << " first mismatch "
            << at;
        if (applies) {  // the last row's position is past the table
          EXPECT_TRUE(std::isnan(got[(kM - 1) * n + kHeadDim - 1]));
          EXPECT_FALSE(std::isnan(got[(kM - 1) * n]));
        }
      }
    }
  }
}

TEST(Fp8BlockGemmTest, Bf16OutputIsTheRoundedFp32Output) {
  const Operands op = MakeOperands(37, 190, 640, 8, Source::kQuantized);
  for (Fp8GemmTile tile : {Fp8GemmTile::kAuto, Fp8GemmTile::kN128M128}) {
    const std::vector<float> f32 = RunGpu(op, tile);
    std::vector<float> rounded(f32.size());
    for (size_t i = 0; i < f32.size(); ++i) rounded[i] = RoundToBf16(f32[i]);
    int64_t at = -1;
    EXPECT_EQ(BitMismatches(RunGpu(op, tile, Fp8GemmOutput::kBf16), rounded, &at), 0)
        << "first mismatch " << at;
  }
}

// A NaN activation block (as the quantizer writes it: scale 0xFF, codes 0x7F)
// makes its row NaN; a weight tile with scale 0xFF makes its 32 columns NaN.
// Everything else stays finite and within the bound.
TEST(Fp8BlockGemmTest, NanBlocksPropagateToTheirOutputsOnly) {
  Operands op = MakeOperands(20, 100, 256, 12, Source::kQuantized);
  std::fill(op.x.begin() + 5 * 256 + 64, op.x.begin() + 5 * 256 + 96, 0x7F);
  op.x_scales[5 * 8 + 2] = 0xFF;  // row 5, K block 2
  op.w_scales[2 * 8 + 7] = 0xFF;  // rows 64..95, K block 7
  const std::vector<float> got = RunGpu(op, Fp8GemmTile::kAuto);
  ASSERT_EQ(got.size(), static_cast<size_t>(20 * 100));
  for (int64_t i = 0; i < 20; ++i) {
    for (int64_t j = 0; j < 100; ++j) {
      const bool want_nan = i == 5 || (j >= 64 && j < 96);
      EXPECT_EQ(std::isnan(got[i * 100 + j]), want_nan) << i << ", " << j;
    }
  }
}

// Measures what the tensor core keeps of one 32-element block sum: 1 plus
// one small product 2^-e (scales 1.0), for e = 10 .. 18. Prints the result;
// the bound above assumes only that the kept part is within kTensorCoreRel.
TEST(Fp8BlockGemmTest, TensorCoreBlockSum) {
  Operands op{.m = 1, .n = 9, .k = 32};
  op.x.assign(32, 0x00);
  op.x_scales.assign(1, 127);
  op.w.assign(9 * 32, 0x00);
  op.w_scales.assign(1, 127);
  op.x[0] = 0x38;  // 1.0
  op.x[1] = 0x01;  // 2^-9 (smallest subnormal)
  for (int e = 10; e <= 18; ++e) {
    const int row = e - 10;
    op.w[row * 32 + 0] = 0x38;  // 1.0
    // w[1] = 2^-(e - 9): e4m3 normal 2^-6 .. 2^-1 has code (exp + 7) << 3,
    // subnormal 2^-7 .. 2^-9 has code 4, 2, 1.
    const int p = e - 9;  // 1 .. 9
    op.w[row * 32 + 1] =
        p <= 6 ? static_cast<uint8_t>((7 - p) << 3) : static_cast<uint8_t>(1 << (9 - p));
  }
  const std::vector<float> got = RunGpu(op, Fp8GemmTile::kAuto);
  ASSERT_EQ(got.size(), 9u);
  for (int e = 10; e <= 18; ++e) {
    const double want = 1.0 + std::ldexp(1.0, -e);
    std::printf("1 + 2^-%d: tensor core %.10g (exact %.10g)%s\n", e, got[e - 10], want,
                got[e - 10] == want ? "" : "  <- not kept");
    EXPECT_LE(std::fabs(got[e - 10] - want), kTensorCoreRel * want);
  }
}

TEST(Fp8BlockGemmTest, ReplaysFromACudaGraph) {
  const Operands op = MakeOperands(8, 320, 1024, 21, Source::kQuantized);
  const std::vector<float> want = RunGpu(op, Fp8GemmTile::kAuto);
  DeviceBuffer<uint8_t> x(op.x), xs(op.x_scales), w(op.w), ws(op.w_scales);
  DeviceBuffer<float> y(op.m * op.n);
  y.Poison(0xFF);
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  cudaGraph_t graph;
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
  const absl::Status status = Fp8BlockGemm({.x = x.get(),
                                            .x_scales = xs.get(),
                                            .w = w.get(),
                                            .w_scales = ws.get(),
                                            .y = y.get(),
                                            .m = op.m,
                                            .n = op.n,
                                            .k = op.k},
                                           stream);
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  ASSERT_TRUE(status.ok()) << status;
  cudaGraphExec_t exec;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  int64_t at = -1;
  EXPECT_EQ(BitMismatches(y.Download(), want, &at), 0) << at;
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

TEST(Fp8BlockGemmTest, RefusesBadArguments) {
  DeviceBuffer<uint8_t> buf(1 << 16);
  ASSERT_TRUE(buf.ok());
  uint8_t* d = buf.get();
  const Fp8BlockGemmParams good{
      .x = d, .x_scales = d, .w = d, .w_scales = d, .y = d, .m = 2, .n = 32, .k = 64};
  EXPECT_TRUE(Fp8BlockGemm(good, nullptr).ok());
  using P = Fp8BlockGemmParams;
  EXPECT_TRUE(EachIsInvalidArgument(good,
                                    [](const P& p) { return Fp8BlockGemm(p, nullptr).code(); },
                                    {
                                        [](P& p) { p.w = nullptr; },
                                        [](P& p) { p.k = 40; },
                                        [](P& p) { p.m = 0; },
                                        [&](P& p) { p.x = d + 8; },
                                        [](P& p) {  // wgmma runs whole warpgroups
                                          p.tile = Fp8GemmTile::kN32M8;
                                          p.math = Fp8GemmMath::kWgmma;
                                        },
                                    }));
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

}  // namespace
}  // namespace weir::kernels::cuda::dense
