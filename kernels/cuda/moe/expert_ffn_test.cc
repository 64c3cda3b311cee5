#include "kernels/cuda/moe/expert_ffn.h"

#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <span>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/moe_expert.h"
#include "kernels/cuda/moe/test_util.h"
#include "kernels/cuda/moe/weight_test_util.h"

namespace weir::kernels::cuda {
namespace {

using moe_test::BitMismatches;
using moe_test::DeviceBuffer;
using moe_test::MaxAbsError;
using moe_test::RelativeError;
using moe_test::Synced;
using moe_test::MakeWeight;
using moe_test::StoredWeight;

struct FfnCase {
  cpu::WeightFormat format;
  int64_t dim, inter;
  std::vector<int64_t> group_rows;
  bool route_weights;
  float limit;
  bool bf16;
  double tolerance;  // relative Frobenius error
};

void RunCase(const FfnCase& c, int seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int groups = static_cast<int>(c.group_rows.size());
  std::vector<int64_t> offsets = {0};
  for (int64_t m : c.group_rows) offsets.push_back(offsets.back() + m);
  const int64_t rows = offsets.back();
  std::vector<float> x(rows * c.dim), rw;
  for (float& v : x) v = normal(rng);
  if (c.route_weights) {
    rw.resize(rows);
    for (float& v : rw) v = 0.05f + std::fabs(normal(rng));
  }
  // w1 x ~ N(0, 16): the clamp at 10 is hit now and then.
  std::vector<StoredWeight> w1, w2, w3;
  for (int g = 0; g < groups; ++g) {
    w1.push_back(MakeWeight(c.format, c.inter, c.dim, 4.0f / std::sqrt(float(c.dim)), rng));
    w3.push_back(MakeWeight(c.format, c.inter, c.dim, 2.0f / std::sqrt(float(c.dim)), rng));
    w2.push_back(MakeWeight(c.format, c.dim, c.inter, 1.0f / std::sqrt(float(c.inter)), rng));
  }
  // CPU: kernels/cpu SwigluExpert per group (FP8 / MXFP4 weights quantize
  // their input activation, as DenseWeight::fp8_activation says).
  std::vector<float> want(rows * c.dim);
  for (int g = 0; g < groups; ++g) {
    const int64_t m = c.group_rows[g];
    if (m == 0) continue;
    const cpu::ExpertWeights e{w1[g].View(), w2[g].View(), w3[g].View()};
    const std::span<const float> rw_g =
        c.route_weights ? std::span<const float>(rw).subspan(offsets[g], m)
                        : std::span<const float>();
    const absl::Status s = cpu::SwigluExpert(
        e, {.x = std::span<const float>(x).subspan(offsets[g] * c.dim, m * c.dim),
            .route_weight = rw_g,
            .y = std::span<float>(want).subspan(offsets[g] * c.dim, m * c.dim),
            .rows = m,
            .swiglu_limit = c.limit,
            .bf16_boundaries = c.bf16});
    ASSERT_TRUE(s.ok()) << s;
  }
  // GPU.
  std::vector<std::unique_ptr<DeviceBuffer<float>>> owned;
  std::vector<const float*> p1, p2, p3;
  for (int g = 0; g < groups; ++g) {
    for (auto [src, dst] : {std::pair{&w1[g], &p1}, {&w2[g], &p2}, {&w3[g], &p3}}) {
      owned.push_back(std::make_unique<DeviceBuffer<float>>(src->dequant));
      dst->push_back(owned.back()->get());
    }
  }
  DeviceBuffer<const float*> d1(p1), d2(p2), d3(p3);
  DeviceBuffer<float> dx(x), drw(rw), hidden(rows * c.inter), y(rows * c.dim);
  DeviceBuffer<int64_t> doff(offsets);
  hidden.Poison();
  y.Poison();
  const bool quantized = c.format != cpu::WeightFormat::kF32;
  const absl::Status s = GroupedExpertFfn(
      {.x = dx.get(), .group_offsets = doff.get(), .route_weight = drw.get(), .w1 = d1.get(),
       .w3 = d3.get(), .w2 = d2.get(), .hidden = hidden.get(), .y = y.get(), .rows = rows,
       .dim = c.dim, .inter = c.inter, .num_groups = groups, .swiglu_limit = c.limit,
       .w13_fp8_activation = quantized, .w2_fp8_activation = quantized, .round_bf16 = c.bf16},
      nullptr);
  ASSERT_TRUE(s.ok()) << s;
  ASSERT_TRUE(Synced());
  const std::vector<float> got = y.Download();
  const double rel = RelativeError(got, want);
  const int64_t differ = BitMismatches(got, want);
  EXPECT_LT(rel, c.tolerance) << "format " << static_cast<int>(c.format) << " dim " << c.dim
                              << " inter " << c.inter << " rows " << rows;
  // With bf16 outputs most elements must be bit-identical: a missed or extra
  // rounding would change nearly all of them.
  if (c.bf16) {
    EXPECT_LE(differ * 20, rows * c.dim) << differ << " of " << rows * c.dim;
  }
  std::printf("GroupedExpertFfn format %d dim %lld inter %lld rows %lld groups %d bf16 %d: "
              "rel err %.3g, max abs err %.3g, %lld/%lld elements differ\n",
              static_cast<int>(c.format), static_cast<long long>(c.dim),
              static_cast<long long>(c.inter), static_cast<long long>(rows), groups, c.bf16, rel,
              MaxAbsError(got, want), static_cast<long long>(differ),
              static_cast<long long>(rows * c.dim));
}

// Tolerances (relative Frobenius error against kernels/cpu):
//  * fp32 weights and activations: only the fp32 summation order differs
//    (~1e-7 relative per product): 1e-5.
//  * bf16 boundaries: a product near a bf16 rounding tie lands on the other
//    side (one bf16 ulp, 2^-8 relative) for a few elements: 1e-3, and at most
//    5% of the outputs may differ at all.
//  * FP8 activations: the same near-tie flips of single e4m3 codes (up to
//    2^-3 relative on one element of a block), rare: 5e-3 (quantizing
//    nothing would give ~3e-2).
TEST(GroupedExpertFfnCudaTest, MatchesTheCpuExperts) {
  using F = cpu::WeightFormat;
  std::mt19937 rng(5);
  std::vector<int64_t> random_groups(8);
  for (int64_t& m : random_groups) m = rng() % 51;
  random_groups[2] = 0;
  const std::vector<FfnCase> cases = {
      {F::kF32, 96, 80, {1, 0, 70, 3}, true, 10.0f, false, 1e-5},
      {F::kF32, 128, 64, {5, 64, 0, 129}, false, 0.0f, true, 1e-3},
      {F::kF32, 32, 32, {1}, true, 10.0f, true, 1e-3},
      {F::kFp8, 256, 96, {17, 1, 40}, true, 10.0f, false, 5e-3},
      {F::kMxfp4, 512, 256, random_groups, true, 10.0f, true, 5e-3},
      {F::kMxfp4, 1024, 512, {200, 3}, true, 10.0f, true, 5e-3},
  };
  int seed = 11;
  for (const FfnCase& c : cases) RunCase(c, seed++);
}

TEST(GroupedExpertFfnCudaTest, MissingWeightsGiveNanRowsOnlyForTheirGroup) {
  const int64_t dim = 64, inter = 32, rows = 5;
  std::mt19937 rng(1);
  const StoredWeight w1 = MakeWeight(cpu::WeightFormat::kF32, inter, dim, 0.1f, rng);
  const StoredWeight w2 = MakeWeight(cpu::WeightFormat::kF32, dim, inter, 0.1f, rng);
  DeviceBuffer<float> d1(w1.dequant), d2(w2.dequant), x(std::vector<float>(rows * dim, 0.5f));
  DeviceBuffer<const float*> p13(std::vector<const float*>{d1.get(), d1.get()});
  DeviceBuffer<const float*> p2(std::vector<const float*>{d2.get(), nullptr});
  DeviceBuffer<int64_t> off(std::vector<int64_t>{0, 2, rows});
  DeviceBuffer<float> hidden(rows * inter), y(rows * dim);
  ASSERT_TRUE(GroupedExpertFfn({.x = x.get(), .group_offsets = off.get(), .w1 = p13.get(),
                                .w3 = p13.get(), .w2 = p2.get(), .hidden = hidden.get(),
                                .y = y.get(), .rows = rows, .dim = dim, .inter = inter,
                                .num_groups = 2},
                               nullptr)
                  .ok());
  ASSERT_TRUE(Synced());
  const std::vector<float> got = y.Download();
  for (int64_t i = 0; i < rows * dim; ++i) {
    EXPECT_EQ(std::isnan(got[i]), i >= 2 * dim) << i;
  }
}

TEST(GroupedExpertFfnCudaTest, RefusesBadArguments) {
  float* f = reinterpret_cast<float*>(256);
  const float* const* w = reinterpret_cast<const float* const*>(256);
  const int64_t* off = reinterpret_cast<const int64_t*>(256);
  const GroupedExpertFfnParams good{.x = f, .group_offsets = off, .w1 = w, .w3 = w, .w2 = w,
                                    .hidden = f, .y = f, .rows = 4, .dim = 64, .inter = 64,
                                    .num_groups = 2};
  EXPECT_TRUE(SupportsGroupedExpertFfn(good));
  GroupedExpertFfnParams bad = good;
  bad.dim = 48;  // FP8 activation blocks need multiples of 32
  EXPECT_EQ(GroupedExpertFfn(bad, nullptr).code(), absl::StatusCode::kInvalidArgument);
  bad.w13_fp8_activation = false;
  EXPECT_TRUE(SupportsGroupedExpertFfn(bad));
  bad = good;
  bad.num_groups = 0;
  EXPECT_EQ(GroupedExpertFfn(bad, nullptr).code(), absl::StatusCode::kInvalidArgument);
  bad = good;
  bad.y = nullptr;
  EXPECT_EQ(GroupedExpertFfn(bad, nullptr).code(), absl::StatusCode::kInvalidArgument);
  bad = good;
  bad.rows = 0;  // nothing to do, nothing launched
  EXPECT_TRUE(GroupedExpertFfn(bad, nullptr).ok());
}

}  // namespace
}  // namespace weir::kernels::cuda
