#include "kernels/cuda/dense/grouped_row_stable_matmul.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/weight_quant.h"
#include "kernels/cuda/dense/row_stable_matmul.h"
#include "kernels/cuda/dense/test_util.h"

namespace weir::kernels::cuda::dense {
namespace {

// What y holds before the call (not NaN, so NaN rows are told apart): rows
// past the last group must still hold it afterwards.
constexpr int kUntouchedByte = 0x7B;

float UntouchedValue() {
  uint32_t bits = 0x7B7B7B7Bu;
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

struct Case {
  const char* name;
  std::vector<int64_t> sizes;  // rows per group
  int64_t slack;               // rows of the bound past the last group
  int64_t out, in;
  std::vector<int> null_groups;  // groups whose weight pointer is null
  int64_t max_group_rows = 0;
};

// RowStableMatmul of `rows` rows of x against w, on the GPU (the reference
// the grouped product must equal bit for bit).
std::vector<float> Reference(const float* x, int64_t rows, const std::vector<float>& w,
                             int64_t out, int64_t in, bool fp8) {
  std::vector<float> xs(x, x + rows * in);
  DeviceBuffer<float> dx(xs), dw(w), dy(rows * out), scratch(rows * in);
  if (!dx.ok() || !dw.ok() || !dy.ok() || !scratch.ok()) return {};
  dy.Poison(0xFF);
  const absl::Status status =
      RowStableMatmul({.x = dx.get(), .w = dw.get(), .y = dy.get(), .rows = rows, .out = out,
                       .in = in, .fp8_activation = fp8, .act_scratch = scratch.get()},
                      nullptr);
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  return dy.Download();
}

void RunCase(const Case& c, bool fp8, uint32_t seed) {
  SCOPED_TRACE(::testing::Message() << c.name << " fp8 " << fp8);
  const int num_groups = static_cast<int>(c.sizes.size());
  std::vector<int64_t> offsets(num_groups + 1, 0);
  std::partial_sum(c.sizes.begin(), c.sizes.end(), offsets.begin() + 1);
  const int64_t used = offsets.back();
  const int64_t rows = used + c.slack;
  std::mt19937 rng(seed);
  const std::vector<float> x = NormalValues(rows * c.in, rng, 1.0f);
  std::vector<std::vector<float>> w(num_groups);
  std::vector<std::unique_ptr<DeviceBuffer<float>>> dw(num_groups);
  std::vector<const float*> w_ptrs(num_groups, nullptr);
  for (int g = 0; g < num_groups; ++g) {
    w[g] = NormalValues(c.out * c.in, rng, 0.05f);
    if (std::find(c.null_groups.begin(), c.null_groups.end(), g) != c.null_groups.end()) {
      continue;
    }
    dw[g] = std::make_unique<DeviceBuffer<float>>(w[g]);
    ASSERT_TRUE(dw[g]->ok());
    w_ptrs[g] = dw[g]->get();
  }
  DeviceBuffer<float> dx(x), dy(rows * c.out), scratch(rows * c.in);
  DeviceBuffer<int64_t> doffsets(offsets);
  DeviceBuffer<const float*> dptrs(w_ptrs);
  ASSERT_TRUE(dx.ok() && dy.ok() && scratch.ok() && doffsets.ok() && dptrs.ok());
  dy.Poison(kUntouchedByte);
  const GroupedMatmulParams params{
      .x = dx.get(), .group_offsets = doffsets.get(), .w = dptrs.get(), .y = dy.get(),
      .rows = rows, .out = c.out, .in = c.in, .num_groups = num_groups, .fp8_activation = fp8,
      .act_scratch = scratch.get(), .max_group_rows = c.max_group_rows};
  ASSERT_TRUE(SupportsRowStableGroupedMatmul(params));
  const absl::Status status = RowStableGroupedMatmul(params, nullptr);
  ASSERT_TRUE(status.ok()) << status;
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<float> y = dy.Download();

  int64_t mismatches = 0, nan_rows = 0, compared = 0;
  for (int g = 0; g < num_groups; ++g) {
    if (c.sizes[g] == 0) continue;
    const std::vector<float> got(y.begin() + offsets[g] * c.out,
                                 y.begin() + offsets[g + 1] * c.out);
    if (w_ptrs[g] == nullptr) {
      int64_t not_nan = 0;
      for (float v : got) not_nan += !std::isnan(v);
      EXPECT_EQ(not_nan, 0) << "group " << g << " has a null weight: its rows must be NaN";
      nan_rows += c.sizes[g];
      continue;
    }
    const std::vector<float> want =
        Reference(x.data() + offsets[g] * c.in, c.sizes[g], w[g], c.out, c.in, fp8);
    int64_t first = -1;
    const int64_t bad = BitMismatches(got, want, &first);
    EXPECT_EQ(bad, 0) << "group " << g << " (" << c.sizes[g] << " rows from " << offsets[g]
                      << "): first mismatch at row " << first / c.out << " col "
                      << first % c.out << ": got " << (first >= 0 ? got[first] : 0.0f)
                      << " want " << (first >= 0 ? want[first] : 0.0f);
    mismatches += bad;
    compared += static_cast<int64_t>(got.size());
  }
  int64_t touched = 0;
  const float untouched = UntouchedValue();
  for (int64_t i = used * c.out; i < rows * c.out; ++i) {
    touched += std::memcmp(&y[i], &untouched, sizeof(float)) != 0;
  }
  EXPECT_EQ(touched, 0) << "rows past offsets[num_groups] must not be written";
  std::printf("%-28s fp8 %d: groups %d rows %lld/%lld out %lld in %lld: %lld values compared, "
              "%lld bit mismatches, %lld NaN rows (null weights), %lld written past the end\n",
              c.name, fp8, num_groups, static_cast<long long>(used),
              static_cast<long long>(rows), static_cast<long long>(c.out),
              static_cast<long long>(c.in), static_cast<long long>(compared),
              static_cast<long long>(mismatches), static_cast<long long>(nan_rows),
              static_cast<long long>(touched));
}

// `count` group sizes drawn from {0, 1, ..., max}, with an empty and a 1-row
// group at fixed places.
std::vector<int64_t> RandomSizes(int count, int64_t max, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int64_t> pick(0, max);
  std::vector<int64_t> sizes(count);
  for (int64_t& s : sizes) s = pick(rng);
  if (count > 2) {
    sizes[1] = 0;
    sizes[2] = 1;
  }
  return sizes;
}

TEST(RowStableGroupedMatmulCudaTest, EachGroupIsBitIdenticalToRowStableMatmulOfItsRows) {
  const Case cases[] = {
      {"one group", {5}, 0, 70, 256},
      {"one group of one row", {1}, 3, 33, 64},
      {"64 groups, decode-like", RandomSizes(64, 4, 7), 9, 96, 128},
      {"64 groups, empty and 1-row", RandomSizes(64, 1, 8), 0, 65, 96},
      {"8 groups, medium tiles", RandomSizes(8, 24, 9), 5, 70, 256},
      {"2 groups, large tiles", {150, 37}, 2, 129, 96},
      {"K tail (in 37)", {3, 0, 17, 1}, 4, 33, 37},
      {"first and last empty", {0, 6, 2, 0}, 1, 40, 64},
      {"null weights", {4, 3, 0, 2}, 2, 50, 64, {1, 2}},
      // A hint smaller than the largest group only narrows the grid: blocks
      // loop over the group's remaining row tiles.
      {"hint below the largest group", {150, 3, 40}, 0, 64, 64, {}, 8},
      {"exact hint", RandomSizes(16, 6, 10), 3, 64, 160, {}, 6},
  };
  uint32_t seed = 100;
  for (const Case& c : cases) {
    for (bool fp8 : {false, true}) {
      if (fp8 && c.in % 32 != 0) continue;
      RunCase(c, fp8, seed++);
    }
  }
}

// The decode step captures the launch in a CUDA graph once and replays it with
// new group sizes written to the device: each replay must use the sizes of
// its time.
TEST(RowStableGroupedMatmulCudaTest, AGraphReplayFollowsTheOffsetsOnTheDevice) {
  constexpr int kGroups = 6;
  constexpr int64_t kRows = 24, kOut = 48, kIn = 64;
  std::mt19937 rng(5);
  const std::vector<float> x = NormalValues(kRows * kIn, rng, 1.0f);
  std::vector<std::vector<float>> w(kGroups);
  std::vector<std::unique_ptr<DeviceBuffer<float>>> dw(kGroups);
  std::vector<const float*> w_ptrs(kGroups);
  for (int g = 0; g < kGroups; ++g) {
    w[g] = NormalValues(kOut * kIn, rng, 0.05f);
    dw[g] = std::make_unique<DeviceBuffer<float>>(w[g]);
    ASSERT_TRUE(dw[g]->ok());
    w_ptrs[g] = dw[g]->get();
  }
  DeviceBuffer<float> dx(x), dy(kRows * kOut), scratch(kRows * kIn);
  DeviceBuffer<int64_t> doffsets(kGroups + 1);
  DeviceBuffer<const float*> dptrs(w_ptrs);
  ASSERT_TRUE(dx.ok() && dy.ok() && scratch.ok() && doffsets.ok() && dptrs.ok());
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  cudaGraph_t graph;
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
  const absl::Status status = RowStableGroupedMatmul(
      {.x = dx.get(), .group_offsets = doffsets.get(), .w = dptrs.get(), .y = dy.get(),
       .rows = kRows, .out = kOut, .in = kIn, .num_groups = kGroups, .fp8_activation = true,
       .act_scratch = scratch.get()},
      stream);
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  ASSERT_TRUE(status.ok()) << status;
  cudaGraphExec_t exec;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  const std::vector<std::vector<int64_t>> size_sets = {
      {4, 4, 4, 4, 4, 4}, {0, 24, 0, 0, 0, 0}, {1, 0, 7, 2, 0, 3}, {0, 0, 0, 0, 0, 1}};
  for (const std::vector<int64_t>& sizes : size_sets) {
    std::vector<int64_t> offsets(kGroups + 1, 0);
    std::partial_sum(sizes.begin(), sizes.end(), offsets.begin() + 1);
    ASSERT_EQ(cudaMemcpy(doffsets.get(), offsets.data(), offsets.size() * sizeof(int64_t),
                         cudaMemcpyHostToDevice),
              cudaSuccess);
    dy.Poison(kUntouchedByte);
    // The copy and the memset ran on the legacy stream, which a non-blocking
    // stream does not wait for.
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    const std::vector<float> y = dy.Download();
    int64_t mismatches = 0;
    for (int g = 0; g < kGroups; ++g) {
      if (sizes[g] == 0) continue;
      const std::vector<float> want =
          Reference(x.data() + offsets[g] * kIn, sizes[g], w[g], kOut, kIn, true);
      const std::vector<float> got(y.begin() + offsets[g] * kOut,
                                   y.begin() + offsets[g + 1] * kOut);
      int64_t first = -1;
      mismatches += BitMismatches(got, want, &first);
    }
    const float untouched = UntouchedValue();
    int64_t touched = 0;
    for (int64_t i = offsets.back() * kOut; i < kRows * kOut; ++i) {
      touched += std::memcmp(&y[i], &untouched, sizeof(float)) != 0;
    }
    EXPECT_EQ(mismatches, 0) << "replay with " << offsets.back() << " rows in use";
    EXPECT_EQ(touched, 0) << "replay with " << offsets.back() << " rows in use";
    std::printf("graph replay, %lld rows in use: %lld bit mismatches\n",
                static_cast<long long>(offsets.back()), static_cast<long long>(mismatches));
  }
  EXPECT_EQ(cudaGraphExecDestroy(exec), cudaSuccess);
  EXPECT_EQ(cudaGraphDestroy(graph), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(stream), cudaSuccess);
}

// ---- MXFP4 weights ---------------------------------------------------------
//
// The MXFP4 path must give exactly the bits of the fp32 path over
// cpu::DequantizeMxfp4Weight of the same codes and scales: no tolerance, since
// dequantization is exact (or overflows to +-Inf identically) and the
// arithmetic after it is the same. NaN matches any NaN.

// Scale codes written over some blocks: the tiny end (e = 0 is the fp32
// subnormal 2^-127, products down to 2^-128), 2^0, the top (2^127: e2m1
// values >= 2 overflow to Inf) and the NaN code.
constexpr std::array<uint8_t, 9> kExtremeScales = {0x00, 0x01, 0x02, 0x03, 0x04,
                                                   0x05, 0x7F, 0xFE, 0xFF};

struct Mxfp4Weight {
  std::vector<uint8_t> codes;   // [out, in / 2]
  std::vector<uint8_t> scales;  // [out, in / 32]
  std::vector<float> dequantized;  // [out, in], cpu::DequantizeMxfp4Weight
};

// Random weights quantized with cpu::QuantizeMxfp4Weight: each 32-block is
// scaled by 2^j, j uniform in [-40, 40], so the scale codes spread. With
// `extremes`, one block holds a NaN (the quantizer gives it scale 0xFF) and
// the blocks (i * 37 + salt) mod blocks get the scale kExtremeScales[i].
Mxfp4Weight MakeMxfp4(int64_t out, int64_t in, std::mt19937& rng, bool extremes, int salt) {
  std::vector<float> w = NormalValues(out * in, rng, 1.0f);
  const int64_t blocks = out * in / 32;
  std::uniform_int_distribution<int> exponent(-40, 40);
  for (int64_t b = 0; b < blocks; ++b) {
    const float f = std::ldexp(1.0f, exponent(rng));
    for (int64_t i = 0; i < 32; ++i) w[b * 32 + i] *= f;
  }
  if (extremes) w[((salt * 11 + 5) % blocks) * 32 + 3] = std::nanf("");
  Mxfp4Weight m;
  m.codes.resize(out * in / 2);
  m.scales.resize(blocks);
  m.dequantized.resize(out * in);
  absl::Status s = cpu::QuantizeMxfp4Weight(w, out, in, m.codes, m.scales);
  EXPECT_TRUE(s.ok()) << s;
  if (extremes) {
    for (size_t i = 0; i < kExtremeScales.size(); ++i) {
      m.scales[(static_cast<int64_t>(i) * 37 + salt) % blocks] = kExtremeScales[i];
    }
  }
  s = cpu::DequantizeMxfp4Weight(m.codes, m.scales, out, in, m.dequantized);
  EXPECT_TRUE(s.ok()) << s;
  return m;
}

struct WeightCensus {
  int64_t subnormal = 0, inf = 0, nan = 0;
  void Add(const std::vector<float>& v) {
    for (float f : v) {
      subnormal += std::fpclassify(f) == FP_SUBNORMAL;
      inf += std::isinf(f);
      nan += std::isnan(f);
    }
  }
};

struct Mxfp4Case {
  const char* name;
  std::vector<int64_t> sizes;  // rows per group
  int64_t slack;               // rows of the bound past the last group
  int64_t out, in;
  // Groups without weights: even positions of this list get a null code
  // pointer, odd positions a null scale pointer (the fp32 run a null w).
  std::vector<int> null_groups;
  bool extremes = true;
};

void RunMxfp4Case(const Mxfp4Case& c, bool fp8, uint32_t seed) {
  SCOPED_TRACE(::testing::Message() << c.name << " fp8 " << fp8);
  const int num_groups = static_cast<int>(c.sizes.size());
  std::vector<int64_t> offsets(num_groups + 1, 0);
  std::partial_sum(c.sizes.begin(), c.sizes.end(), offsets.begin() + 1);
  const int64_t used = offsets.back();
  const int64_t rows = used + c.slack;
  std::mt19937 rng(seed);
  const std::vector<float> x = NormalValues(rows * c.in, rng, 1.0f);

  std::vector<std::unique_ptr<DeviceBuffer<uint8_t>>> dcodes(num_groups), dscales(num_groups);
  std::vector<std::unique_ptr<DeviceBuffer<float>>> dw(num_groups);
  std::vector<const uint8_t*> code_ptrs(num_groups, nullptr), scale_ptrs(num_groups, nullptr);
  std::vector<const float*> w_ptrs(num_groups, nullptr);
  std::vector<bool> null_group(num_groups, false);
  WeightCensus census;
  for (int g = 0; g < num_groups; ++g) {
    const Mxfp4Weight m = MakeMxfp4(c.out, c.in, rng, c.extremes, g);
    census.Add(m.dequantized);
    dcodes[g] = std::make_unique<DeviceBuffer<uint8_t>>(m.codes);
    dscales[g] = std::make_unique<DeviceBuffer<uint8_t>>(m.scales);
    dw[g] = std::make_unique<DeviceBuffer<float>>(m.dequantized);
    ASSERT_TRUE(dcodes[g]->ok() && dscales[g]->ok() && dw[g]->ok());
    code_ptrs[g] = dcodes[g]->get();
    scale_ptrs[g] = dscales[g]->get();
    w_ptrs[g] = dw[g]->get();
  }
  for (size_t i = 0; i < c.null_groups.size(); ++i) {
    const int g = c.null_groups[i];
    null_group[g] = true;
    w_ptrs[g] = nullptr;
    (i % 2 == 0 ? code_ptrs : scale_ptrs)[g] = nullptr;
  }
  DeviceBuffer<float> dx(x), dy(rows * c.out), dy_fp32(rows * c.out), scratch(rows * c.in);
  DeviceBuffer<int64_t> doffsets(offsets);
  DeviceBuffer<const float*> dw_ptrs(w_ptrs);
  DeviceBuffer<const uint8_t*> dcode_ptrs(code_ptrs), dscale_ptrs(scale_ptrs);
  ASSERT_TRUE(dx.ok() && dy.ok() && dy_fp32.ok() && scratch.ok() && doffsets.ok() &&
              dw_ptrs.ok() && dcode_ptrs.ok() && dscale_ptrs.ok());
  dy.Poison(kUntouchedByte);
  dy_fp32.Poison(kUntouchedByte);
  const GroupedMatmulParams fp32{
      .x = dx.get(), .group_offsets = doffsets.get(), .w = dw_ptrs.get(), .y = dy_fp32.get(),
      .rows = rows, .out = c.out, .in = c.in, .num_groups = num_groups, .fp8_activation = fp8,
      .act_scratch = scratch.get()};
  GroupedMatmulParams mxfp4 = fp32;
  mxfp4.w = nullptr;
  mxfp4.y = dy.get();
  mxfp4.w_mxfp4 = dcode_ptrs.get();
  mxfp4.w_mxfp4_scales = dscale_ptrs.get();
  ASSERT_TRUE(SupportsRowStableGroupedMatmul(fp32));
  ASSERT_TRUE(SupportsRowStableGroupedMatmul(mxfp4));
  absl::Status status = RowStableGroupedMatmul(fp32, nullptr);
  ASSERT_TRUE(status.ok()) << status;
  status = RowStableGroupedMatmul(mxfp4, nullptr);
  ASSERT_TRUE(status.ok()) << status;
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<float> y = dy.Download();
  const std::vector<float> want = dy_fp32.Download();

  // Bit for bit over all rows of the bound: rows past offsets[num_groups]
  // hold the poison in both.
  int64_t first = -1;
  const int64_t mismatches = BitMismatches(y, want, &first);
  EXPECT_EQ(mismatches, 0) << "first mismatch at row " << first / c.out << " col "
                           << first % c.out << ": MXFP4 " << (first >= 0 ? y[first] : 0.0f)
                           << " fp32 over the dequantized weights "
                           << (first >= 0 ? want[first] : 0.0f);
  int64_t finite = 0, nonfinite = 0, null_not_nan = 0, null_values = 0;
  for (int g = 0; g < num_groups; ++g) {
    for (int64_t i = offsets[g] * c.out; i < offsets[g + 1] * c.out; ++i) {
      if (null_group[g]) {
        null_not_nan += !std::isnan(y[i]);
        ++null_values;
      } else {
        (std::isfinite(y[i]) ? finite : nonfinite) += 1;
      }
    }
  }
  EXPECT_EQ(null_not_nan, 0) << "groups without weights must give NaN rows";
  // Only a few columns meet an Inf or NaN weight: the comparison is not one
  // of NaN against NaN.
  EXPECT_GT(finite, 4 * nonfinite) << "too few finite outputs to make the comparison meaningful";
  int64_t touched = 0;
  const float untouched = UntouchedValue();
  for (int64_t i = used * c.out; i < rows * c.out; ++i) {
    touched += std::memcmp(&y[i], &untouched, sizeof(float)) != 0;
  }
  EXPECT_EQ(touched, 0) << "rows past offsets[num_groups] must not be written";
  std::printf("MXFP4 %-26s fp8 %d: groups %d rows %lld/%lld out %lld in %lld: %lld values "
              "compared with the fp32 path (%lld finite, %lld Inf/NaN, %lld NaN of null "
              "weights), %lld bit mismatches; weights: %lld subnormal, %lld Inf, %lld NaN\n",
              c.name, fp8, num_groups, static_cast<long long>(used),
              static_cast<long long>(rows), static_cast<long long>(c.out),
              static_cast<long long>(c.in), static_cast<long long>(y.size()),
              static_cast<long long>(finite), static_cast<long long>(nonfinite),
              static_cast<long long>(null_values), static_cast<long long>(mismatches),
              static_cast<long long>(census.subnormal), static_cast<long long>(census.inf),
              static_cast<long long>(census.nan));
}

TEST(RowStableGroupedMatmulCudaTest, Mxfp4IsBitIdenticalToFp32OverTheDequantizedWeights) {
  const Mxfp4Case cases[] = {
      {"one group", {5}, 0, 70, 256},
      {"one group of one row", {1}, 3, 33, 64},
      {"48 groups, decode-like", RandomSizes(48, 4, 17), 9, 96, 128},
      {"48 groups, empty and 1-row", RandomSizes(48, 1, 18), 0, 65, 96},
      {"8 groups, medium tiles", RandomSizes(8, 24, 19), 5, 70, 256},
      {"2 groups, large tiles", {150, 37}, 2, 129, 96},
      {"first and last empty", {0, 6, 2, 0}, 1, 40, 64},
      {"null codes and scales", {4, 3, 0, 2, 5}, 2, 50, 64, {1, 2, 3, 4}},
      {"no extreme scales", RandomSizes(12, 6, 20), 1, 64, 160, {}, false},
  };
  uint32_t seed = 300;
  for (const Mxfp4Case& c : cases) {
    for (bool fp8 : {false, true}) RunMxfp4Case(c, fp8, seed++);
  }
}

// Against the CPU directly: with x the identity, y[k, n] is the decoded
// weight [n, k] itself (the other products are +-0), so every code x scale
// pair is checked against cpu::DequantizeMxfp4Weight without the fp32 path.
// Codes are uniform random bytes and block b gets scale code b mod 256, so
// all 16 e2m1 codes and all 256 E8M0 codes occur.
TEST(RowStableGroupedMatmulCudaTest, Mxfp4DecodesEveryCodeAsTheCpu) {
  constexpr int64_t kIn = 64, kOut = 256;  // 512 blocks: every scale code twice
  std::mt19937 rng(77);
  std::uniform_int_distribution<int> byte(0, 255);
  std::vector<uint8_t> codes(kOut * kIn / 2), scales(kOut * kIn / 32);
  for (uint8_t& b : codes) b = static_cast<uint8_t>(byte(rng));
  for (size_t b = 0; b < scales.size(); ++b) scales[b] = static_cast<uint8_t>(b % 256);
  std::vector<float> w(kOut * kIn);
  const absl::Status deq = cpu::DequantizeMxfp4Weight(codes, scales, kOut, kIn, w);
  ASSERT_TRUE(deq.ok()) << deq;
  std::vector<float> x(kIn * kIn, 0.0f);
  for (int64_t k = 0; k < kIn; ++k) x[k * kIn + k] = 1.0f;
  const std::vector<int64_t> offsets = {0, kIn};
  DeviceBuffer<uint8_t> dcodes(codes), dscales(scales);
  const std::vector<const uint8_t*> code_ptrs = {dcodes.get()}, scale_ptrs = {dscales.get()};
  DeviceBuffer<const uint8_t*> dcode_ptrs(code_ptrs), dscale_ptrs(scale_ptrs);
  DeviceBuffer<float> dx(x), dy(kIn * kOut);
  DeviceBuffer<int64_t> doffsets(offsets);
  ASSERT_TRUE(dcodes.ok() && dscales.ok() && dcode_ptrs.ok() && dscale_ptrs.ok() && dx.ok() &&
              dy.ok() && doffsets.ok());
  dy.Poison(kUntouchedByte);
  GroupedMatmulParams p{.x = dx.get(), .group_offsets = doffsets.get(), .y = dy.get(),
                        .rows = kIn, .out = kOut, .in = kIn, .num_groups = 1};
  p.w_mxfp4 = dcode_ptrs.get();
  p.w_mxfp4_scales = dscale_ptrs.get();
  const absl::Status status = RowStableGroupedMatmul(p, nullptr);
  ASSERT_TRUE(status.ok()) << status;
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<float> y = dy.Download();
  int64_t checked = 0, bad = 0, subnormal = 0, nonfinite_rows = 0;
  for (int64_t n = 0; n < kOut; ++n) {
    bool finite_row = true;
    for (int64_t k = 0; k < kIn; ++k) finite_row = finite_row && std::isfinite(w[n * kIn + k]);
    nonfinite_rows += !finite_row;
    for (int64_t k = 0; k < kIn; ++k) {
      const float got = y[k * kOut + n];
      const float ref = w[n * kIn + k];
      bool ok;
      if (!finite_row) {
        // 0 * Inf or NaN reaches every output of the row.
        ok = !std::isfinite(got);
      } else {
        // -0 + +0 = +0 in the lane sums; every other value passes unchanged.
        const float want = ref == 0.0f ? 0.0f : ref;
        ok = std::memcmp(&got, &want, sizeof(float)) == 0;
        subnormal += std::fpclassify(ref) == FP_SUBNORMAL;
      }
      if (!ok && bad++ < 5) {
        ADD_FAILURE() << "weight [" << n << ", " << k << "] code "
                      << ((codes[(n * kIn + k) / 2] >> (4 * (k % 2))) & 0xF) << " scale 0x"
                      << std::hex << int{scales[(n * kIn + k) / 32]} << std::dec << ": got "
                      << got << ", CPU dequantized " << ref;
      }
      ++checked;
    }
  }
  EXPECT_EQ(bad, 0);
  EXPECT_GT(subnormal, 0);
  std::printf("MXFP4 decode of all codes: %lld weights checked against the CPU (%lld "
              "subnormal, %lld rows with Inf/NaN), %lld wrong\n",
              static_cast<long long>(checked), static_cast<long long>(subnormal),
              static_cast<long long>(nonfinite_rows), static_cast<long long>(bad));
}

TEST(RowStableGroupedMatmulCudaTest, RefusesBadArguments) {
  DeviceBuffer<float> a(64 * 64), b(64 * 64), c(64 * 64);
  DeviceBuffer<int64_t> offsets(3);
  DeviceBuffer<const float*> ptrs(2);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok() && offsets.ok() && ptrs.ok());
  const GroupedMatmulParams good{.x = a.get(), .group_offsets = offsets.get(), .w = ptrs.get(),
                                 .y = b.get(), .rows = 4, .out = 8, .in = 64, .num_groups = 2,
                                 .fp8_activation = true, .act_scratch = c.get()};
  EXPECT_TRUE(SupportsRowStableGroupedMatmul(good));
  auto code = [](const GroupedMatmulParams& p) {
    return RowStableGroupedMatmul(p, nullptr).code();
  };
  std::vector<std::pair<const char*, GroupedMatmulParams>> bad;
  auto with = [&](const char* what, auto change) {
    GroupedMatmulParams p = good;
    change(p);
    bad.emplace_back(what, p);
  };
  with("rows 0", [](auto& p) { p.rows = 0; });
  with("out 0", [](auto& p) { p.out = 0; });
  with("in -1", [](auto& p) { p.in = -1; });
  with("no groups", [](auto& p) { p.num_groups = 0; });
  with("too many groups for grid z", [](auto& p) { p.num_groups = 65536; });
  with("out past the grid", [](auto& p) { p.out = int64_t{65535} * 32 + 1; });
  with("negative hint", [](auto& p) { p.max_group_rows = -1; });
  with("null x", [](auto& p) { p.x = nullptr; });
  with("null offsets", [](auto& p) { p.group_offsets = nullptr; });
  with("null weight array", [](auto& p) { p.w = nullptr; });
  with("null y", [](auto& p) { p.y = nullptr; });
  with("FP8 with in 48", [](auto& p) { p.in = 48; });
  with("FP8 without scratch", [](auto& p) { p.act_scratch = nullptr; });
  with("y overlaps x", [&](auto& p) { p.y = a.get() + 10; });
  with("scratch overlaps y", [&](auto& p) { p.act_scratch = b.get() + 1; });
  for (const auto& [what, p] : bad) {
    EXPECT_FALSE(SupportsRowStableGroupedMatmul(p)) << what;
    EXPECT_EQ(code(p), absl::StatusCode::kInvalidArgument) << what;
  }
  // MXFP4 weights: the two arrays together, instead of w, and in % 32 == 0.
  DeviceBuffer<const uint8_t*> codes(2), scales(2);
  ASSERT_TRUE(codes.ok() && scales.ok());
  GroupedMatmulParams mxfp4 = good;
  mxfp4.w = nullptr;
  mxfp4.w_mxfp4 = codes.get();
  mxfp4.w_mxfp4_scales = scales.get();
  EXPECT_TRUE(SupportsRowStableGroupedMatmul(mxfp4));
  GroupedMatmulParams mxfp4_no_fp8 = mxfp4;
  mxfp4_no_fp8.fp8_activation = false;
  mxfp4_no_fp8.act_scratch = nullptr;
  EXPECT_TRUE(SupportsRowStableGroupedMatmul(mxfp4_no_fp8));
  std::vector<std::pair<const char*, GroupedMatmulParams>> bad_mxfp4;
  auto with_mxfp4 = [&](const char* what, const GroupedMatmulParams& base, auto change) {
    GroupedMatmulParams p = base;
    change(p);
    bad_mxfp4.emplace_back(what, p);
  };
  with_mxfp4("MXFP4 and w both set", mxfp4, [&](auto& p) { p.w = ptrs.get(); });
  with_mxfp4("MXFP4 codes without scales", mxfp4, [](auto& p) { p.w_mxfp4_scales = nullptr; });
  with_mxfp4("MXFP4 scales without codes", mxfp4, [](auto& p) { p.w_mxfp4 = nullptr; });
  with_mxfp4("w and MXFP4 scales", good, [&](auto& p) { p.w_mxfp4_scales = scales.get(); });
  with_mxfp4("MXFP4 with in 48, no FP8", mxfp4_no_fp8, [](auto& p) { p.in = 48; });
  with_mxfp4("MXFP4 with in 37, no FP8", mxfp4_no_fp8, [](auto& p) { p.in = 37; });
  with_mxfp4("MXFP4 with no groups", mxfp4, [](auto& p) { p.num_groups = 0; });
  for (const auto& [what, p] : bad_mxfp4) {
    EXPECT_FALSE(SupportsRowStableGroupedMatmul(p)) << what;
    EXPECT_EQ(code(p), absl::StatusCode::kInvalidArgument) << what;
  }
  GroupedMatmulParams no_fp8 = good;  // without FP8 the scratch is not needed
  no_fp8.fp8_activation = false;
  no_fp8.act_scratch = nullptr;
  no_fp8.in = 37;
  EXPECT_TRUE(SupportsRowStableGroupedMatmul(no_fp8));
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // nothing was launched
}

}  // namespace
}  // namespace weir::kernels::cuda::dense
