#include "kernels/cuda/moe/moe_gate.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdio>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/moe_gate.h"
#include "kernels/cuda/moe/test_util.h"

namespace weir::kernels::cuda {
namespace {

using moe_test::DeviceBuffer;
using moe_test::Synced;

struct GateCase {
  int64_t tokens, dim;
  int experts, topk;
  GateScore score;
};

cpu::ScoreFunc CpuScore(GateScore s) {
  switch (s) {
    case GateScore::kSigmoid:
      return cpu::ScoreFunc::kSigmoid;
    case GateScore::kSoftmax:
      return cpu::ScoreFunc::kSoftmax;
    default:
      return cpu::ScoreFunc::kSqrtSoftplus;
  }
}

// Inputs of one routing call; `bias`/`bias_vl`/`mask` may be empty.
struct GateInputs {
  std::vector<float> x, w, bias, bias_vl;
  std::vector<uint8_t> mask;
};

struct GateOutputs {
  std::vector<int32_t> indices;
  std::vector<float> weights;
};

GateOutputs RunCpu(const GateCase& c, const GateInputs& in, const cpu::MoeGateParams& params) {
  GateOutputs out{std::vector<int32_t>(c.tokens * c.topk), std::vector<float>(c.tokens * c.topk)};
  const absl::Status s = cpu::MoeGate(params, {.x = in.x, .weight = in.w, .bias = in.bias,
                                               .bias_vl = in.bias_vl, .image_mask = in.mask,
                                               .indices = out.indices, .weights = out.weights,
                                               .tokens = c.tokens, .dim = c.dim});
  EXPECT_TRUE(s.ok()) << s;
  return out;
}

// split_logits: MoeGateLogits first, then MoeGate on the given logits.
GateOutputs RunGpu(const GateCase& c, const GateInputs& in, const cpu::MoeGateParams& params,
                   bool split_logits = false, bool wide_block = false) {
  DeviceBuffer<float> x(in.x), w(in.w), bias(in.bias), bias_vl(in.bias_vl);
  DeviceBuffer<float> logits(c.tokens * c.experts);
  logits.Poison();
  if (split_logits) {
    EXPECT_TRUE(MoeGateLogits({.x = x.get(), .weight = w.get(), .logits = logits.get(),
                               .tokens = c.tokens, .dim = c.dim, .num_experts = c.experts},
                              nullptr)
                    .ok());
  }
  DeviceBuffer<uint8_t> mask(in.mask);
  DeviceBuffer<int32_t> indices(c.tokens * c.topk);
  DeviceBuffer<float> weights(c.tokens * c.topk);
  indices.Poison();
  weights.Poison();
  const absl::Status s = MoeGate({.x = split_logits ? nullptr : x.get(),
                                  .weight = split_logits ? nullptr : w.get(),
                                  .logits = split_logits ? logits.get() : nullptr,
                                  .bias = bias.get(),
                                  .bias_vl = bias_vl.get(),
                                  .image_mask = mask.get(),
                                  .indices = indices.get(),
                                  .weights = weights.get(),
                                  .tokens = c.tokens,
                                  .dim = c.dim,
                                  .num_experts = c.experts,
                                  .topk = c.topk,
                                  .gate_temp = params.gate_temp,
                                  .route_scale = params.route_scale,
                                  .norm_topk_prob = params.norm_topk_prob,
                                  .score = c.score,
                                  .wide_block = wide_block},
                                 nullptr);
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_TRUE(Synced());
  return {indices.Download(), weights.Download()};
}

TEST(MoeGateCudaTest, MatchesTheCpuReferenceOnRandomInputs) {
  const std::vector<GateCase> cases = {
      {1, 64, 8, 2, GateScore::kSqrtSoftplus},   {37, 256, 64, 6, GateScore::kSqrtSoftplus},
      {5, 4096, 256, 8, GateScore::kSqrtSoftplus}, {9, 100, 7, 7, GateScore::kSqrtSoftplus},
      {3, 33, 1, 1, GateScore::kSigmoid},        {64, 512, 300, 9, GateScore::kSigmoid},
      {17, 96, 48, 4, GateScore::kSoftmax},      {2, 7168, 384, 6, GateScore::kSoftmax},
  };
  for (const GateCase& c : cases) {
    std::mt19937 rng(c.tokens * 131 + c.dim * 7 + c.experts);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    GateInputs in;
    in.x.resize(c.tokens * c.dim);
    in.w.resize(c.experts * c.dim);
    for (float& v : in.x) v = normal(rng);
    for (float& v : in.w) v = normal(rng) / std::sqrt(float(c.dim)) * 3.0f;
    if (c.experts > 1) {  // some tokens with bias, some image tokens with bias_vl
      in.bias.resize(c.experts);
      in.bias_vl.resize(c.experts);
      for (float& v : in.bias) v = 0.1f * normal(rng);
      for (float& v : in.bias_vl) v = 0.1f * normal(rng);
      in.mask.resize(c.tokens);
      for (uint8_t& m : in.mask) m = rng() % 3 == 0;
    }
    const cpu::MoeGateParams params{.num_experts = c.experts, .topk = c.topk, .gate_temp = 1.3f,
                                    .route_scale = 2.5f, .norm_topk_prob = c.topk % 3 != 0,
                                    .score_func = CpuScore(c.score)};
    const GateOutputs want = RunCpu(c, in, params);
    const GateOutputs got = RunGpu(c, in, params);
    ASSERT_EQ(got.indices.size(), want.indices.size());
    // The split form (MoeGateLogits, then MoeGate on its logits): the same bits.
    const GateOutputs split = RunGpu(c, in, params, /*split_logits=*/true);
    // The wide block (a warp an expert up to 32): the same bits.
    const GateOutputs wide = RunGpu(c, in, params, /*split_logits=*/false, /*wide_block=*/true);
    EXPECT_EQ(wide.indices, want.indices) << "wide, " << c.tokens << "x" << c.dim;
    EXPECT_EQ(
        std::memcmp(wide.weights.data(), want.weights.data(), want.weights.size() * sizeof(float)),
        0)
        << "wide, " << c.tokens << "x" << c.dim;
    EXPECT_EQ(split.indices, want.indices) << "split, " << c.tokens << "x" << c.dim;
    EXPECT_EQ(std::memcmp(split.weights.data(), want.weights.data(),
                          want.weights.size() * sizeof(float)),
              0)
        << "split, " << c.tokens << "x" << c.dim;
    // Same logit order (fmath::LaneDot), the same exp / log1p (fmath) and no
    // FMA on either side: identical choices and bit-identical weights.
    EXPECT_EQ(got.indices, want.indices) << c.tokens << "x" << c.dim << " e" << c.experts;
    int64_t weight_mismatches = 0;
    double max_rel = 0;
    for (size_t i = 0; i < got.weights.size(); ++i) {
      weight_mismatches +=
          std::memcmp(&got.weights[i], &want.weights[i], sizeof(float)) != 0;
      max_rel = std::max(max_rel, std::fabs(double(got.weights[i]) - want.weights[i]) /
                                      std::max(1e-30, std::fabs(double(want.weights[i]))));
    }
    EXPECT_EQ(weight_mismatches, 0) << c.tokens << "x" << c.dim << " e" << c.experts
                                    << ", max rel err " << max_rel;
    std::printf("MoeGate %lldx%lld e%d k%d score %d: %lld weights differ, max rel err %.3g\n",
                static_cast<long long>(c.tokens), static_cast<long long>(c.dim), c.experts,
                c.topk, static_cast<int>(c.score), static_cast<long long>(weight_mismatches),
                max_rel);
  }
}

// Small dyadic inputs make every logit exact whatever the summation order, so
// the choice (ties included) must be identical: lower id first among equals.
TEST(MoeGateCudaTest, BreaksTiesExactlyAsTheCpu) {
  for (GateScore score : {GateScore::kSqrtSoftplus, GateScore::kSigmoid, GateScore::kSoftmax}) {
    const GateCase c{40, 64, 32, 8, score};
    std::mt19937 rng(7 + static_cast<int>(score));
    GateInputs in;
    in.x.resize(c.tokens * c.dim);
    in.w.resize(c.experts * c.dim);
    for (float& v : in.x) v = static_cast<float>(static_cast<int>(rng() % 9) - 4) / 4.0f;
    for (float& v : in.w) v = static_cast<float>(static_cast<int>(rng() % 5) - 2) / 8.0f;
    // Duplicate expert rows in several places: equal logits, equal scores.
    for (int e : {3, 9, 17, 30}) std::copy_n(&in.w[5 * c.dim], c.dim, &in.w[e * c.dim]);
    for (int e : {20, 21, 2}) std::copy_n(&in.w[11 * c.dim], c.dim, &in.w[e * c.dim]);
    // Token 0 has x = 0: all scores tie, only the bias separates them.
    std::fill_n(in.x.begin(), c.dim, 0.0f);
    in.bias.assign(c.experts, 0.0f);
    for (int e = 0; e < c.experts; e += 2) in.bias[e] = 0.25f;  // equal rows with equal bias still tie
    const cpu::MoeGateParams params{.num_experts = c.experts, .topk = c.topk, .gate_temp = 1.0f,
                                    .route_scale = 1.5f, .norm_topk_prob = true,
                                    .score_func = CpuScore(score)};
    const GateOutputs want = RunCpu(c, in, params);
    const GateOutputs got = RunGpu(c, in, params);
    EXPECT_EQ(got.indices, want.indices) << "score " << static_cast<int>(score);
    EXPECT_EQ(std::vector<int32_t>(got.indices.begin(), got.indices.begin() + c.topk),
              (std::vector<int32_t>{0, 2, 4, 6, 8, 10, 12, 14}));
    // The same fmath exp / log1p on both sides: bit-identical weights.
    double max_rel = 0;
    for (size_t i = 0; i < got.weights.size(); ++i) {
      max_rel = std::max(max_rel, std::fabs(double(got.weights[i]) - want.weights[i]) /
                                      std::fabs(double(want.weights[i])));
    }
    EXPECT_EQ(max_rel, 0.0);
    std::printf("MoeGate exact ties, score %d: max weight rel err %.3g\n",
                static_cast<int>(score), max_rel);
  }
}

TEST(MoeGateCudaTest, RefusesBadArguments) {
  float* p = reinterpret_cast<float*>(256);
  int32_t* i = reinterpret_cast<int32_t*>(256);
  const MoeGateParams good{.x = p, .weight = p, .indices = i, .weights = p, .tokens = 1,
                           .dim = 8, .num_experts = 4, .topk = 2};
  EXPECT_TRUE(SupportsMoeGate(good));
  MoeGateParams bad = good;
  bad.topk = 5;
  EXPECT_EQ(MoeGate(bad, nullptr).code(), absl::StatusCode::kInvalidArgument);
  bad = good;
  bad.gate_temp = 0.0f;
  EXPECT_EQ(MoeGate(bad, nullptr).code(), absl::StatusCode::kInvalidArgument);
  bad = good;
  bad.x = nullptr;
  EXPECT_EQ(MoeGate(bad, nullptr).code(), absl::StatusCode::kInvalidArgument);
  bad = good;
  bad.num_experts = kMoeGateMaxExperts + 1;
  EXPECT_FALSE(SupportsMoeGate(bad));
}

TEST(ExpertSlotsCudaTest, RotatesReplicasAsThePlacementSays) {
  // 10 logical experts on 16 slots: every expert once, then random replicas,
  // shuffled.
  const int logical = 10, physical = 16, topk = 4;
  const int64_t tokens = 203;
  std::mt19937 rng(99);
  std::vector<int32_t> p2l(physical);
  for (int s = 0; s < physical; ++s) p2l[s] = s < logical ? s : static_cast<int32_t>(rng() % logical);
  std::shuffle(p2l.begin(), p2l.end(), rng);
  ReplicaTable table;
  ASSERT_TRUE(BuildReplicaTable(p2l, logical, &table).ok());
  std::vector<int32_t> indices(tokens * topk);
  for (int32_t& e : indices) e = static_cast<int32_t>(rng() % logical);
  indices[5] = -1;       // out of range
  indices[77] = logical;  // out of range
  DeviceBuffer<int32_t> d_idx(indices), d_off(table.offsets), d_slots(table.slots);
  DeviceBuffer<int32_t> out(tokens * topk), bad(std::vector<int32_t>{0});
  for (int rank : {0, 3}) {
    out.Poison();
    bad.Upload({0});
    ASSERT_TRUE(ExpertSlots({.indices = d_idx.get(), .replica_offsets = d_off.get(),
                             .replica_slots = d_slots.get(), .slots = out.get(),
                             .bad_count = bad.get(), .tokens = tokens, .topk = topk,
                             .num_logical = logical, .rank = rank},
                            nullptr)
                    .ok());
    ASSERT_TRUE(Synced());
    const std::vector<int32_t> got = out.Download();
    for (int64_t i = 0; i < tokens * topk; ++i) {
      const int32_t e = indices[i];
      if (e < 0 || e >= logical) {
        EXPECT_EQ(got[i], -1) << i;
        continue;
      }
      std::vector<int32_t> reps;  // ascending slots holding e
      for (int s = 0; s < physical; ++s) {
        if (p2l[s] == e) reps.push_back(s);
      }
      EXPECT_EQ(got[i], reps[(i / topk + rank) % reps.size()]) << "pair " << i << " rank " << rank;
    }
    EXPECT_EQ(bad.Download()[0], 2);
  }
}

TEST(ExpertSlotsCudaTest, RefusesBadArguments) {
  ReplicaTable table;
  EXPECT_EQ(BuildReplicaTable(std::vector<int32_t>{0, 2, 0}, 3, &table).code(),
            absl::StatusCode::kInvalidArgument);  // expert 1 has no slot
  EXPECT_EQ(BuildReplicaTable(std::vector<int32_t>{0, 3}, 3, &table).code(),
            absl::StatusCode::kInvalidArgument);
  int32_t* p = reinterpret_cast<int32_t*>(256);
  EXPECT_EQ(ExpertSlots({.indices = p, .replica_offsets = p, .replica_slots = p, .slots = p,
                         .tokens = 1, .topk = 0, .num_logical = 2},
                        nullptr)
                .code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace weir::kernels::cuda
