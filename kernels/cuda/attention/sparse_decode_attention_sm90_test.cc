#include "kernels/cuda/attention/sparse_decode_attention_sm90.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/quant.h"
#include "kernels/cuda/attention/kv_mirror.h"
#include "kernels/cuda/attention/sparse_attention.h"
#include "kernels/cuda/decode/rows.h"
#include "kernels/cuda/device_buffer.h"

// GPU tests (tag `gpu`): SparseDecodeAttention against the reference
// SparseAttention (bit-identical to the CPU kernel) run on the dequantized
// stored rows, and batch invariance.
namespace weir::kernels::cuda {
namespace {

using testing::DeviceBuffer;
constexpr int kD = kSparseDecodeHeadDim;

// Stored pools (quant.h formats) and their dequantized fp32 rows.
struct Pools {
  int64_t win_rows = 0, comp_rows = 0;
  std::vector<uint8_t> win_codes, win_scales, comp_codes, comp_scales;
  std::vector<float> table;  // [win_rows + comp_rows, 512]: window rows first
};

// Random rows whose 16-element blocks are scaled by 2^e, e uniform in
// [-max_exp, max_exp], so the FP8 and FP4 block scales take many values.
Pools MakePools(int64_t win_rows, int64_t comp_rows, std::mt19937& rng, int max_exp = 2) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-max_exp, max_exp);
  auto rows = [&](int64_t n) {
    std::vector<float> x(n * kD);
    for (size_t b = 0; b < x.size(); b += 16) {
      const float f = std::ldexp(1.0f, exponent(rng));
      for (size_t i = b; i < b + 16; ++i) x[i] = f * normal(rng);
    }
    return x;
  };
  Pools p;
  p.win_rows = win_rows;
  p.comp_rows = comp_rows;
  p.table.resize((win_rows + comp_rows) * kD);
  const std::vector<float> w = rows(win_rows), c = rows(comp_rows);
  p.win_codes.resize(w.size());
  p.win_scales.resize(w.size() / 32);
  p.comp_codes.resize(c.size() / 2);
  p.comp_scales.resize(c.size() / 16);
  std::span<float> table(p.table);
  EXPECT_TRUE(cpu::QuantizeFp8(w, 32, p.win_codes, p.win_scales).ok());
  EXPECT_TRUE(cpu::DequantizeFp8(p.win_codes, p.win_scales, 32, table.first(w.size())).ok());
  EXPECT_TRUE(cpu::QuantizeFp4(c, 16, cpu::Fp4Scale::kE4m3, p.comp_codes, p.comp_scales).ok());
  EXPECT_TRUE(cpu::DequantizeFp4(p.comp_codes, p.comp_scales, 16, cpu::Fp4Scale::kE4m3,
                                 table.subspan(w.size()))
                  .ok());
  return p;
}

// The device copies of a Pools.
struct DevicePools {
  explicit DevicePools(const Pools& p)
      : win_codes(p.win_codes), win_scales(p.win_scales), comp_codes(p.comp_codes),
        comp_scales(p.comp_scales), table(p.table) {}
  DeviceBuffer<uint8_t> win_codes, win_scales, comp_codes, comp_scales;
  DeviceBuffer<float> table;
};

// One batch of queries.
struct Batch {
  int64_t queries = 0;
  int heads = 0, win_width = 0, comp_width = 0;
  std::vector<float> q, sink;
  std::vector<int32_t> win_index, comp_index;
};

// Random bf16-valued q (as the model's) with standard deviation `q_std`,
// sinks around 0, index rows with `empty` of the entries -1 and, with `dups`,
// every other entry a repeat of the one before. With the default pools
// (|kv row| ~ 47) q_std 1.5 gives logits of standard deviation ~3: a softmax
// with a few dominant rows and a long tail, as in the model.
Batch MakeBatch(int64_t queries, int heads, int win_width, int comp_width, const Pools& pools,
                double empty, bool dups, std::mt19937& rng, float q_std = 1.5f) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  Batch b{.queries = queries, .heads = heads, .win_width = win_width, .comp_width = comp_width};
  b.q.resize(queries * heads * kD);
  for (float& v : b.q) v = q_std * normal(rng);
  cpu::RoundToBf16InPlace(b.q);
  b.sink.resize(heads);
  for (float& v : b.sink) v = 2.0f * normal(rng);
  auto fill = [&](std::vector<int32_t>& index, int width, int64_t rows) {
    index.resize(queries * width);
    std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(std::max<int64_t>(rows, 1) - 1));
    for (size_t i = 0; i < index.size(); ++i) {
      index[i] = (rows == 0 || unit(rng) < empty) ? -1 : pick(rng);
      if (dups && i % 2 == 1 && (i % width) > 0) index[i] = index[i - 1];
    }
  };
  fill(b.win_index, win_width, pools.win_rows);
  fill(b.comp_index, comp_width, pools.comp_rows);
  return b;
}

// The launch of `kernel` over the device copies of batch `b` and the pools.
SparseDecodeAttentionParams FastParams(SparseDecodeKernel kernel, const Batch& b,
                                       const DevicePools& dp, const Pools& pools, const float* q,
                                       const float* sink, const int32_t* wi, const int32_t* ci,
                                       float* out) {
  return {.q = q,
          .sink = sink,
          .window_codes = dp.win_codes.get(),
          .window_scales = dp.win_scales.get(),
          .window_index = wi,
          .window_rows = pools.win_rows,
          .window_width = b.win_width,
          .compressed_codes = dp.comp_codes.get(),
          .compressed_scales = dp.comp_scales.get(),
          .compressed_index = ci,
          .compressed_rows = pools.comp_rows,
          .compressed_width = b.comp_width,
          .out = out,
          .queries = b.queries,
          .heads = b.heads,
          .kernel = kernel};
}

// Runs the fast kernel on `b` (output poisoned with NaN first).
std::vector<float> RunFast(SparseDecodeKernel kernel, const Batch& b, const DevicePools& dp,
                           const Pools& pools, float scale = 0.0f, bool round_bf16 = false,
                           int wgmma_range_tiles = 0) {
  DeviceBuffer<float> q(b.q), sink(b.sink), out(b.q.size());
  DeviceBuffer<int32_t> wi(b.win_index), ci(b.comp_index);
  out.Poison();
  SparseDecodeAttentionParams p =
      FastParams(kernel, b, dp, pools, q.get(), sink.get(), wi.get(), ci.get(), out.get());
  p.scale = scale;
  p.round_bf16 = round_bf16;
  p.wgmma_range_tiles = wgmma_range_tiles;
  const absl::Status st = SparseDecodeAttention(p, nullptr);
  EXPECT_TRUE(st.ok()) << st;
  EXPECT_EQ(cudaGetLastError(), cudaSuccess) << "after launch";
  return out.Download();
}

// Reference: SparseAttention over [window rows; compressed rows] with the
// compressed entries shifted by window_rows, as the model concatenates them.
std::vector<float> RunReference(const Batch& b, const DevicePools& dp, const Pools& pools,
                                std::vector<int32_t>& index, float scale) {
  const int width = b.win_width + b.comp_width;
  index.assign(b.queries * width, -1);
  for (int64_t s = 0; s < b.queries; ++s) {
    for (int j = 0; j < b.win_width; ++j) index[s * width + j] = b.win_index[s * b.win_width + j];
    for (int j = 0; j < b.comp_width; ++j) {
      const int32_t t = b.comp_index[s * b.comp_width + j];
      index[s * width + b.win_width + j] = t < 0 ? -1 : t + static_cast<int32_t>(pools.win_rows);
    }
  }
  DeviceBuffer<float> q(b.q), sink(b.sink), out(b.q.size());
  DeviceBuffer<int32_t> di(index);
  out.Poison();
  const absl::Status st = SparseAttention(
      {.q = q.get(), .kv = dp.table.get(), .sink = sink.get(), .index = di.get(),
       .out = out.get(), .queries = b.queries, .heads = b.heads, .head_dim = kD,
       .kv_len = pools.win_rows + pools.comp_rows, .topk = width, .scale = scale},
      nullptr);
  EXPECT_TRUE(st.ok()) << st;
  return out.Download();
}

// Tolerance. q is bf16-valued and the dequantized KV is exact in bf16, so
// the logits differ from the reference only by fp32 summation order. The
// probabilities are rounded to bf16 (relative error <= 2^-9) and the
// denominator sums the rounded values, so each output is a convex
// combination of the listed V rows whose weights differ from the
// reference's by at most ~2 * 2^-9 in total: |out - ref|[c] <= 2^-8 *
// max_t |v_t[c]|. Checked per element with 5e-3 * max_t |v_t[c]| + 1e-6
// (headroom for exp2 vs exp and the order of the fp32 sums); expected
// relative L2 ~1e-3, asserted <= 3e-3.
void Compare(const Batch& b, const Pools& pools, const std::vector<int32_t>& index,
             const std::vector<float>& got, const std::vector<float>& want, const char* name) {
  const int width = b.win_width + b.comp_width;
  double num = 0, den = 0;
  int64_t bad = 0, checked = 0;
  std::vector<double> rel;  // |d| / rms of the reference's head row
  for (int64_t s = 0; s < b.queries; ++s) {
    std::vector<float> vmax(kD, 0.0f);
    bool any = false;
    for (int j = 0; j < width; ++j) {
      const int32_t t = index[s * width + j];
      if (t < 0) continue;
      any = true;
      for (int c = 0; c < kD; ++c) vmax[c] = std::max(vmax[c], std::fabs(pools.table[t * kD + c]));
    }
    for (int h = 0; h < b.heads; ++h) {
      const float* g = got.data() + (s * b.heads + h) * kD;
      const float* w = want.data() + (s * b.heads + h) * kD;
      double rms = 0;
      for (int c = 0; c < kD; ++c) rms += double(w[c]) * w[c];
      rms = std::sqrt(rms / kD);
      for (int c = 0; c < kD; ++c) {
        ++checked;
        if (!any) {  // only the sink: exactly 0, as the reference
          if (!(g[c] == 0.0f && w[c] == 0.0f)) ++bad;
          continue;
        }
        const double d = std::fabs(double(g[c]) - w[c]);
        num += d * d;
        den += double(w[c]) * w[c];
        if (rms > 0) rel.push_back(d / rms);
        if (!(d <= 5e-3 * vmax[c] + 1e-6)) {
          if (bad < 5) {
            std::printf("  mismatch q%lld h%d c%d: got %g want %g vmax %g\n",
                        static_cast<long long>(s), h, c, g[c], w[c], vmax[c]);
          }
          ++bad;
        }
      }
    }
  }
  std::sort(rel.begin(), rel.end());
  const double l2 = den > 0 ? std::sqrt(num / den) : 0.0;
  std::printf("%s: queries %lld heads %d widths %d+%d: rel L2 %.3g, |d|/rms(row) median %.3g "
              "max %.3g, %lld of %lld outside the bound\n",
              name, static_cast<long long>(b.queries), b.heads, b.win_width, b.comp_width, l2,
              rel.empty() ? 0.0 : rel[rel.size() / 2], rel.empty() ? 0.0 : rel.back(),
              static_cast<long long>(bad), static_cast<long long>(checked));
  EXPECT_EQ(bad, 0) << name;
  EXPECT_LE(l2, 3e-3) << name;
}

void CheckAgainstReference(SparseDecodeKernel kernel, const Batch& b, const Pools& pools,
                           const DevicePools& dp, const char* name, float scale = 0.0f) {
  std::vector<int32_t> index;
  const std::vector<float> want = RunReference(b, dp, pools, index, scale);
  const std::vector<float> got = RunFast(kernel, b, dp, pools, scale);
  Compare(b, pools, index, got, want, name);
}

// Every test runs on both kernels (SparseDecodeKernel).
class SparseDecodeAttentionTest : public ::testing::TestWithParam<SparseDecodeKernel> {};

TEST_P(SparseDecodeAttentionTest, MatchesTheReferenceOnDequantizedRows) {
  std::mt19937 rng(11);
  const Pools pools = MakePools(/*win_rows=*/5 * 128, /*comp_rows=*/20000, rng);
  const DevicePools dp(pools);
  // V4.1 decode: 64 heads, window 128 + index_topk 512, a few -1.
  CheckAgainstReference(GetParam(), MakeBatch(5, 64, 128, 512, pools, 0.05, false, rng), pools, dp,
                        "v41 decode");
  // Widths that are multiples of nothing (partial tiles), heads not a
  // multiple of 16, many -1, an explicit scale.
  CheckAgainstReference(GetParam(), MakeBatch(9, 20, 37, 77, pools, 0.6, false, rng), pools, dp,
                        "odd shapes", 0.03f);
  // More heads than one CTA takes (16 or 64): several head groups a query,
  // the last one partial.
  CheckAgainstReference(GetParam(), MakeBatch(3, 130, 100, 300, pools, 0.1, false, rng), pools, dp,
                        "130 heads");
  // Duplicate entries count once per occurrence.
  CheckAgainstReference(GetParam(), MakeBatch(4, 64, 128, 512, pools, 0.1, true, rng), pools, dp,
                        "duplicates");
  // One pool only.
  CheckAgainstReference(GetParam(), MakeBatch(3, 64, 128, 0, pools, 0.0, false, rng), pools, dp,
                        "window only");
  CheckAgainstReference(GetParam(), MakeBatch(3, 64, 0, 512, pools, 0.0, false, rng), pools, dp,
                        "compressed only");
  // A long list (index_topk 2048), nearly full.
  CheckAgainstReference(GetParam(), MakeBatch(2, 64, 128, 2048, pools, 0.01, false, rng), pools, dp,
                        "long list");
  // Nearly flat weights (logit std ~0.6): hundreds of rows contribute.
  CheckAgainstReference(GetParam(), MakeBatch(4, 64, 128, 512, pools, 0.05, false, rng, 0.3f),
                        pools, dp, "flat softmax");
  // Peaked weights (logit std ~30): a few rows decide.
  CheckAgainstReference(GetParam(), MakeBatch(4, 64, 128, 512, pools, 0.05, false, rng, 15.0f),
                        pools, dp, "peaked softmax");
}

TEST_P(SparseDecodeAttentionTest, WideBlockScales) {
  // Blocks from 2^-8 to 2^8: scale codes over a wide range (|kv row| ~ 1600,
  // q_std 0.04 keeps the logits' spread near 3).
  std::mt19937 rng(14);
  const Pools pools = MakePools(256, 4000, rng, /*max_exp=*/8);
  const DevicePools dp(pools);
  CheckAgainstReference(GetParam(), MakeBatch(4, 64, 128, 512, pools, 0.05, false, rng, 0.04f),
                        pools, dp, "wide scales");
}

TEST_P(SparseDecodeAttentionTest, EmptyListsGiveZero) {
  std::mt19937 rng(12);
  const Pools pools = MakePools(256, 1000, rng);
  const DevicePools dp(pools);
  // Every entry -1 (only the sink): out = 0 for every head.
  CheckAgainstReference(GetParam(), MakeBatch(3, 64, 128, 512, pools, 1.0, false, rng), pools, dp,
                        "all empty");
  // Query 1 of 4 empty among full ones; entries past the pools count as -1.
  Batch b = MakeBatch(4, 64, 128, 512, pools, 0.0, false, rng);
  for (int j = 0; j < 128; ++j) b.win_index[1 * 128 + j] = -1;
  for (int j = 0; j < 512; ++j) b.comp_index[1 * 512 + j] = j % 2 ? -1 : -7;
  const std::vector<float> got = RunFast(GetParam(), b, dp, pools);
  for (int64_t i = 64 * kD; i < 2 * 64 * kD; ++i) ASSERT_EQ(got[i], 0.0f) << i;
  // Out-of-range entries are skipped like -1 (the reference rejects them).
  Batch oob = b;
  for (int j = 0; j < 512; ++j) oob.comp_index[1 * 512 + j] = 1000 + j;
  const std::vector<float> got_oob = RunFast(GetParam(), oob, dp, pools);
  EXPECT_EQ(std::memcmp(got.data(), got_oob.data(), got.size() * sizeof(float)), 0);
  // Zero widths: only the sink everywhere.
  const std::vector<float> none =
      RunFast(GetParam(), MakeBatch(2, 16, 0, 0, pools, 0.0, false, rng), dp, pools);
  for (float v : none) ASSERT_EQ(v, 0.0f);
}

// Copies query `from` of `src` into query `to` of `dst` (same heads, widths).
void CopyQuery(const Batch& src, int64_t from, Batch& dst, int64_t to) {
  const int64_t qn = src.heads * kD;
  std::copy_n(src.q.begin() + from * qn, qn, dst.q.begin() + to * qn);
  std::copy_n(src.win_index.begin() + from * src.win_width, src.win_width,
              dst.win_index.begin() + to * dst.win_width);
  std::copy_n(src.comp_index.begin() + from * src.comp_width, src.comp_width,
              dst.comp_index.begin() + to * dst.comp_width);
}

TEST_P(SparseDecodeAttentionTest, BatchInvariant) {
  std::mt19937 rng(13);
  const Pools pools = MakePools(64 * 128, 64 * 600, rng);
  const DevicePools dp(pools);
  const Batch probe = MakeBatch(1, 64, 128, 512, pools, 0.1, false, rng);
  const std::vector<float> alone = RunFast(GetParam(), probe, dp, pools);
  const std::vector<float> again = RunFast(GetParam(), probe, dp, pools);
  ASSERT_EQ(std::memcmp(alone.data(), again.data(), alone.size() * sizeof(float)), 0)
      << "not deterministic";
  const int64_t qn = 64 * kD;
  for (const auto& [size, at] : {std::pair<int64_t, int64_t>{7, 3}, {64, 41}, {64, 0}}) {
    Batch batch = MakeBatch(size, 64, 128, 512, pools, 0.1, false, rng);
    batch.sink = probe.sink;  // the sinks are the layer's, shared by the batch
    CopyQuery(probe, 0, batch, at);
    const std::vector<float> got = RunFast(GetParam(), batch, dp, pools);
    EXPECT_EQ(std::memcmp(got.data() + at * qn, alone.data(), qn * sizeof(float)), 0)
        << "query at " << at << " of " << size << " differs from the query alone";
  }
  // round_bf16: the same output through RoundToBf16, in the same launch.
  std::vector<float> rounded = alone;
  cpu::RoundToBf16InPlace(rounded);
  const std::vector<float> got = RunFast(GetParam(), probe, dp, pools, 0.0f, /*round_bf16=*/true);
  EXPECT_EQ(std::memcmp(got.data(), rounded.data(), rounded.size() * sizeof(float)), 0)
      << "round_bf16 is not the rounded output";
}

// kWgmma64's ranges (one CTA a range, a cluster folding them in rank order):
// every range size gives the reference's result within the bound, and the
// folded result stays batch-invariant (BatchInvariant above runs the default
// ranges: 5 of 2 tiles at the V4.1 shape).
TEST(SparseDecodeAttentionRangesTest, EveryRangeSizeMatchesTheReference) {
  std::mt19937 rng(15);
  const Pools pools = MakePools(5 * 128, 20000, rng);
  const DevicePools dp(pools);
  const Batch b = MakeBatch(5, 64, 128, 512, pools, 0.05, false, rng);
  std::vector<int32_t> index;
  const std::vector<float> want = RunReference(b, dp, pools, index, 0.0f);
  // 5 (1 tile asked, raised to 2: at most 8 ranges), 5, 4, 3, 1, 1 ranges of 64-entry tiles.
  for (const int tiles : {1, 2, 3, 4, 10, 100}) {
    const std::vector<float> got =
        RunFast(SparseDecodeKernel::kWgmma64, b, dp, pools, 0.0f, false, tiles);
    Compare(b, pools, index, got, want, ("range tiles " + std::to_string(tiles)).c_str());
  }
  // A long list (2,176 entries, 34 tiles): the default ranges are 7 of 5 tiles,
  // and so are 3 tiles asked (raised to fit 8 ranges).
  const Batch longer = MakeBatch(2, 64, 128, 2048, pools, 0.01, false, rng);
  const std::vector<float> want_long = RunReference(longer, dp, pools, index, 0.0f);
  const std::vector<float> got_long = RunFast(SparseDecodeKernel::kWgmma64, longer, dp, pools);
  Compare(longer, pools, index, got_long, want_long, "long list, default ranges");
  EXPECT_EQ(RunFast(SparseDecodeKernel::kWgmma64, longer, dp, pools, 0.0f, false, 3), got_long)
      << "3 tiles asked of a 34-tile list: the 7 ranges of 5 tiles, the same bits";
}

// Two launches over one batch, each computing the queries of its role
// (query_role): every query gets the bits of a launch of its own kernel and
// ranges over the whole batch, and a launch leaves the other role's outputs
// as they were.
TEST(SparseDecodeAttentionRolesTest, EachQueryGetsItsRolesLaunch) {
  std::mt19937 rng(23);
  const Pools pools = MakePools(5 * 128, 20000, rng);
  const DevicePools dp(pools);
  const Batch b = MakeBatch(9, 64, 128, 512, pools, 0.05, false, rng);
  std::vector<int32_t> role(b.queries);
  for (int64_t i = 0; i < b.queries; ++i) role[i] = (i % 3 == 1 || i == 4) ? 1 : 0;
  struct Shape {
    SparseDecodeKernel kernel;
    int tiles;
  };
  const Shape shapes[][2] = {
      {{SparseDecodeKernel::kWgmma64, 2}, {SparseDecodeKernel::kWgmma64, 16}},
      {{SparseDecodeKernel::kMma16, 0}, {SparseDecodeKernel::kWgmma64, 16}}};
  DeviceBuffer<float> q(b.q), sink(b.sink), out(b.q.size());
  DeviceBuffer<int32_t> wi(b.win_index), ci(b.comp_index), roles(role);
  const int64_t qn = int64_t{b.heads} * kD;
  auto launch = [&](const Shape& shape, const int32_t* query_role, int which) {
    SparseDecodeAttentionParams p =
        FastParams(shape.kernel, b, dp, pools, q.get(), sink.get(), wi.get(), ci.get(), out.get());
    p.wgmma_range_tiles = shape.tiles;
    p.query_role = query_role;
    p.role = which;
    const absl::Status st = SparseDecodeAttention(p, nullptr);
    ASSERT_TRUE(st.ok()) << st;
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  };
  for (const auto& pair : shapes) {
    std::vector<float> whole[2];
    for (int r = 0; r < 2; ++r) {
      out.Poison();
      launch(pair[r], nullptr, 0);
      whole[r] = out.Download();
    }
    ASSERT_NE(whole[0], whole[1]) << "the two shapes must differ for this test to tell them apart";
    out.Poison();
    launch(pair[0], roles.get(), 0);
    const std::vector<float> first = out.Download();
    launch(pair[1], roles.get(), 1);
    const std::vector<float> both = out.Download();
    for (int64_t i = 0; i < b.queries; ++i) {
      const size_t at = static_cast<size_t>(i * qn),
                   bytes = static_cast<size_t>(qn) * sizeof(float);
      EXPECT_EQ(std::memcmp(both.data() + at, whole[role[i]].data() + at, bytes), 0)
          << "query " << i << " (role " << role[i] << ") differs from its shape's launch";
      if (role[i] == 1) {  // untouched by the first launch: still Poison's 0xFF bytes
        const auto* bytes_at = reinterpret_cast<const uint8_t*>(first.data() + at);
        EXPECT_TRUE(std::all_of(bytes_at, bytes_at + bytes, [](uint8_t v) { return v == 0xFF; }))
            << "query " << i << " of role 1 was written by the role-0 launch";
      }
    }
  }
}

// The grouped output (SparseDecodeAttentionParams::grouped): the kWgmma64
// kernel writing V4.1's wo_a input itself gives the bits of its plain output
// followed by decode's SwapAxes with the inverse RoPE, fp32 and bf16, with
// and without the bf16 boundary, on one CTA a query and on clusters of
// ranges, for groups of 8 heads (V4.1) and of 2.
TEST(SparseDecodeAttentionGroupedTest, GivesThePlainOutputsSwapAxesBits) {
  std::mt19937 rng(31);
  const Pools pools = MakePools(5 * 128, 20000, rng);
  const DevicePools dp(pools);
  const Batch b = MakeBatch(6, 64, 128, 512, pools, 0.05, false, rng);
  constexpr int kRopeDim = 64;
  constexpr int64_t kRows = 300;  // positions
  std::vector<float> table(kRows * kRopeDim);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  for (float& v : table) v = unit(rng);
  std::vector<int64_t> positions(b.queries);
  for (int64_t& p : positions) p = static_cast<int64_t>(rng() % kRows);
  DeviceBuffer<float> q(b.q), sink(b.sink), plain(b.q.size()), want(b.q.size()), got(b.q.size()),
      cos_sin(table);
  DeviceBuffer<int32_t> wi(b.win_index), ci(b.comp_index);
  DeviceBuffer<int64_t> pos(positions);
  DeviceBuffer<uint16_t> want16(b.q.size()), got16(b.q.size());
  for (const int64_t width : {int64_t{4096}, int64_t{1024}}) {
    for (const int tiles : {16, 2}) {
      for (const bool round : {true, false}) {
        for (const bool bf16_out : {false, true}) {
          SCOPED_TRACE(::testing::Message() << "width " << width << " tiles " << tiles << " round "
                                            << round << " bf16 " << bf16_out);
          SparseDecodeAttentionParams p =
              FastParams(SparseDecodeKernel::kWgmma64, b, dp, pools, q.get(), sink.get(), wi.get(),
                         ci.get(), plain.get());
          p.round_bf16 = round;
          p.wgmma_range_tiles = tiles;
          ASSERT_TRUE(SparseDecodeAttention(p, nullptr).ok());
          want.Poison();
          want16.Poison();
          ASSERT_TRUE(decode::SwapAxes({.src = plain.get(),
                                        .dst = bf16_out ? nullptr : want.get(),
                                        .dst_bf16 = bf16_out ? want16.get() : nullptr,
                                        .a = b.queries,
                                        .b = b.heads * kD / width,
                                        .width = width,
                                        .rope_positions = pos.get(),
                                        .rope_cos_sin = cos_sin.get(),
                                        .rope_cos_sin_rows = kRows,
                                        .rope_head_dim = kD,
                                        .rope_dim = kRopeDim,
                                        .rope_inverse = true,
                                        .rope_round_bf16 = round},
                                       nullptr)
                          .ok());
          got.Poison();
          got16.Poison();
          p.out = nullptr;
          p.grouped = {.out = bf16_out ? nullptr : got.get(),
                       .out_bf16 = bf16_out ? got16.get() : nullptr,
                       .group_width = width,
                       .positions = pos.get(),
                       .cos_sin = cos_sin.get(),
                       .cos_sin_rows = kRows,
                       .rope_dim = kRopeDim};
          const absl::Status st = SparseDecodeAttention(p, nullptr);
          ASSERT_TRUE(st.ok()) << st;
          ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
          if (bf16_out) {
            EXPECT_EQ(got16.Download(), want16.Download());
          } else {
            const std::vector<float> g = got.Download(), w = want.Download();
            EXPECT_EQ(std::memcmp(g.data(), w.data(), g.size() * sizeof(float)), 0);
          }
        }
      }
    }
  }
}

// bf16 bits -> float.
float Bf16Value(uint16_t bits) {
  const uint32_t w = uint32_t{bits} << 16;
  float f;
  std::memcpy(&f, &w, sizeof(f));
  return f;
}

// DequantizeKvMirror writes each row it names with the stored row's exact
// values (the CPU dequantization, bit for bit as floats) and nothing else;
// kWgmma64 on the mirror, and with wgmma_overlap on either form, gives the
// stored form's bits, on one CTA a query and on clusters of ranges.
TEST(SparseDecodeAttentionMirrorTest, MirrorRowsAndOverlapGiveTheStoredRowsBits) {
  std::mt19937 rng(47);
  // Wide block exponents: scales far from 1 (and FP8 subnormal codes).
  const Pools pools = MakePools(6 * 128, 3000, rng, /*max_exp=*/12);
  const DevicePools dp(pools);
  DeviceBuffer<uint16_t> win16(pools.win_rows * kD), comp16(pools.comp_rows * kD);
  win16.Poison();
  comp16.Poison();
  // Sequence 0: slot 1's ring (rows 128 .. 255 with rings of 128), staging
  // rows 512 .. 767, compressed entries 0 .. 2,999 through a table of 25
  // blocks of 120 entries (block 3 unlisted: -1). Sequence 1: slot 0's ring
  // only, no staging, no entries (last position 2: ratio 4 gives 0).
  constexpr int kRing = 128, kPerBlock = 120, kBlocks = 25;
  std::vector<int32_t> table(2 * kBlocks, -1);
  for (int j = 0; j < kBlocks; ++j) table[kBlocks + j] = j == 3 ? -1 : kBlocks - 1 - j;
  DeviceBuffer<int32_t> tables(table), slot(std::vector<int32_t>{1, 0}),
      stage_first(std::vector<int32_t>{512, -1}), stage_rows(std::vector<int32_t>{256, 0});
  DeviceBuffer<int64_t> last(std::vector<int64_t>{4 * 3000 - 1, 2});
  KvMirrorParams mp{.window_codes = dp.win_codes.get(),
                    .window_scales = dp.win_scales.get(),
                    .window_bf16 = win16.get(),
                    .window_rows = pools.win_rows,
                    .ring_rows = kRing,
                    .compressed_codes = dp.comp_codes.get(),
                    .compressed_scales = dp.comp_scales.get(),
                    .compressed_bf16 = comp16.get(),
                    .compressed_rows = pools.comp_rows,
                    .block_table = tables.get(),
                    .table_width = kBlocks,
                    .entries_per_block = kPerBlock,
                    .ratio = 4,
                    .slot = slot.get(),
                    .last_position = last.get(),
                    .stage_first = stage_first.get(),
                    .stage_rows = stage_rows.get(),
                    .sequences = 2,
                    .max_rows = kRing + 256 + 3000};
  const absl::Status st = DequantizeKvMirror(mp, nullptr);
  ASSERT_TRUE(st.ok()) << st;
  const std::vector<uint16_t> w16 = win16.Download(), c16 = comp16.Download();
  auto check_rows = [&](const std::vector<uint16_t>& got, int64_t rows, int64_t table_row0,
                        auto written) {
    int64_t bad = 0, untouched_bad = 0;
    for (int64_t r = 0; r < rows; ++r) {
      for (int d = 0; d < kD; ++d) {
        const uint16_t g = got[r * kD + d];
        if (written(r)) {
          const float want = pools.table[(table_row0 + r) * kD + d];
          const float v = Bf16Value(g);
          bad += std::memcmp(&v, &want, sizeof(v)) != 0;
        } else {
          untouched_bad += g != 0xFFFFu;
        }
      }
    }
    EXPECT_EQ(bad, 0);
    EXPECT_EQ(untouched_bad, 0);
  };
  check_rows(w16, pools.win_rows, 0,
             [&](int64_t r) { return r < 2 * kRing || (r >= 512 && r < 768); });
  std::vector<bool> comp_written(pools.comp_rows, false);
  for (int j = 0; j < kBlocks; ++j) {
    const int32_t blk = table[kBlocks + j];
    for (int e = 0; blk >= 0 && e < kPerBlock && j * kPerBlock + e < 3000; ++e) {
      comp_written[blk * kPerBlock + e] = true;
    }
  }
  check_rows(c16, pools.comp_rows, pools.win_rows, [&](int64_t r) { return comp_written[r]; });

  // The attention over the mirror: every row the lists may name.
  mp.ring_rows = pools.win_rows;
  mp.sequences = 1;
  mp.max_rows = pools.win_rows + pools.comp_rows;
  std::vector<int32_t> identity(pools.comp_rows);
  for (int64_t j = 0; j < pools.comp_rows; ++j) identity[j] = static_cast<int32_t>(j);
  DeviceBuffer<int32_t> id_table(identity), zero(std::vector<int32_t>{0}),
      none(std::vector<int32_t>{0});
  DeviceBuffer<int64_t> all_last(std::vector<int64_t>{pools.comp_rows - 1});
  mp.block_table = id_table.get();
  mp.table_width = static_cast<int>(pools.comp_rows);
  mp.entries_per_block = 1;
  mp.ratio = 1;
  mp.slot = zero.get();
  mp.last_position = all_last.get();
  mp.stage_rows = none.get();
  ASSERT_TRUE(DequantizeKvMirror(mp, nullptr).ok());
  // With wgmma_overlap too (the next tile's Q K^T behind this tile's P V):
  // the same bits. The sparse batch leaves whole tiles without a listed row
  // (skipped).
  const Batch dense = MakeBatch(40, 64, 128, 512, pools, 0.1, true, rng);
  const Batch sparse = MakeBatch(24, 64, 128, 512, pools, 0.97, false, rng);
  for (const Batch* batch : {&dense, &sparse}) {
    const Batch& b = *batch;
    DeviceBuffer<float> q(b.q), sink(b.sink), want(b.q.size()), got(b.q.size());
    DeviceBuffer<int32_t> wi(b.win_index), ci(b.comp_index);
    for (const int tiles : {16, 0, 3}) {
      for (const bool round : {false, true}) {
        SparseDecodeAttentionParams p =
            FastParams(SparseDecodeKernel::kWgmma64, b, dp, pools, q.get(), sink.get(), wi.get(),
                       ci.get(), want.get());
        p.round_bf16 = round;
        p.wgmma_range_tiles = tiles;
        want.Poison();
        ASSERT_TRUE(SparseDecodeAttention(p, nullptr).ok());
        const std::vector<float> w = want.Download();
        for (const bool mirror : {false, true}) {
          for (const bool overlap : {false, true}) {
            if (!mirror && !overlap) continue;
            SCOPED_TRACE(::testing::Message()
                         << "queries " << b.queries << " tiles " << tiles << " round " << round
                         << " mirror " << mirror << " overlap " << overlap);
            SparseDecodeAttentionParams m = p;
            m.out = got.get();
            m.wgmma_overlap = overlap;
            if (mirror) {
              m.window_bf16 = win16.get();
              m.compressed_bf16 = comp16.get();
              m.window_codes = nullptr;  // not read with a mirror
              m.compressed_scales = nullptr;
            }
            got.Poison();
            const absl::Status run = SparseDecodeAttention(m, nullptr);
            ASSERT_TRUE(run.ok()) << run;
            const std::vector<float> g = got.Download();
            EXPECT_EQ(std::memcmp(g.data(), w.data(), g.size() * sizeof(float)), 0);
          }
        }
      }
    }
  }
  const Batch& b = dense;
  DeviceBuffer<float> q(b.q), sink(b.sink), got(b.q.size());
  DeviceBuffer<int32_t> wi(b.win_index), ci(b.comp_index);
  // Not on kMma16.
  SparseDecodeAttentionParams p = FastParams(SparseDecodeKernel::kMma16, b, dp, pools, q.get(),
                                             sink.get(), wi.get(), ci.get(), got.get());
  p.window_bf16 = win16.get();
  p.compressed_bf16 = comp16.get();
  EXPECT_EQ(SparseDecodeAttention(p, nullptr).code(), absl::StatusCode::kInvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(Kernels, SparseDecodeAttentionTest,
                         ::testing::Values(SparseDecodeKernel::kMma16, SparseDecodeKernel::kWgmma64),
                         [](const ::testing::TestParamInfo<SparseDecodeKernel>& info) {
                           return info.param == SparseDecodeKernel::kMma16 ? "Mma16" : "Wgmma64";
                         });

}  // namespace
}  // namespace weir::kernels::cuda
