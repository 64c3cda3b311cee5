#include "worker/model/local_expert_executor.h"

#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/moe_expert.h"
#include "kernels/cpu/weight_quant.h"
#include "worker/model/cpu_ops.h"
#include "worker/model/expert_ffn.h"

namespace weir::model {
namespace {
namespace cpu = ::weir::kernels::cpu;

constexpr int64_t kDim = 64, kInter = 32, kExperts = 3;

// An MXFP4 expert matrix: stored bytes (for the kernel) and its DenseWeight.
struct Mat {
  std::vector<uint8_t> packed, scales;
  DenseWeight dense;
  cpu::LinearWeight View() const {
    return {.format = cpu::WeightFormat::kMxfp4, .out_features = dense.out,
            .in_features = dense.in, .data = packed, .scales = scales};
  }
};

Mat MakeMat(int64_t out, int64_t in, std::mt19937& gen) {
  std::uniform_real_distribution<float> u(-0.3f, 0.3f);
  std::vector<float> w(out * in);
  for (float& v : w) v = u(gen);
  Mat m;
  m.packed.resize(out * in / 2);
  m.scales.resize(out * in / 32);
  EXPECT_TRUE(cpu::QuantizeMxfp4Weight(w, out, in, m.packed, m.scales).ok());
  m.dense = {.out = out, .in = in, .w = std::vector<float>(out * in), .fp8_activation = true};
  EXPECT_TRUE(cpu::DequantizeMxfp4Weight(m.packed, m.scales, out, in, m.dense.w).ok());
  return m;
}

struct Fixture {
  std::vector<Mat> mats;  // expert e: 3e (w1), 3e+1 (w2), 3e+2 (w3)
  ModelWeights weights;
  Fixture() {
    std::mt19937 gen(3);
    for (int64_t e = 0; e < kExperts; ++e) {
      mats.push_back(MakeMat(kInter, kDim, gen));
      mats.push_back(MakeMat(kDim, kInter, gen));
      mats.push_back(MakeMat(kInter, kDim, gen));
    }
    weights.layers.resize(2);
    for (int64_t e = 0; e < kExperts; ++e) {
      weights.layers[1].ffn.experts.push_back(
          {mats[3 * e].dense, mats[3 * e + 1].dense, mats[3 * e + 2].dense});
    }
  }
};

TEST(LocalExpertExecutorTest, MatchesTheKernelMoeOnStoredWeights) {
  Fixture f;
  CpuOps ops;
  LocalExpertExecutor exec(ops, f.weights, 10.0f);
  const int64_t tokens = 5;
  const int topk = 2;
  std::mt19937 gen(4);
  std::uniform_real_distribution<float> u(-2, 2);
  std::vector<float> x(tokens * kDim);
  for (float& v : x) v = u(gen);
  const std::vector<int32_t> idx = {2, 0, 1, 2, 0, 1, 1, 0, 2, 1};
  const std::vector<float> w = {0.7f, 0.8f, 1.1f, 0.4f, 0.5f, 1.0f, 0.9f, 0.6f, 0.3f, 1.2f};
  ASSERT_TRUE(exec.Dispatch(1, x, {.experts = idx, .weights = w, .tokens = tokens,
                                   .topk = topk}).ok());
  ASSERT_TRUE(exec.RunExperts().ok());
  std::vector<float> y(tokens * kDim);
  ASSERT_TRUE(exec.Combine(y).ok());

  std::vector<cpu::ExpertWeights> kw;
  for (int64_t e = 0; e < kExperts; ++e) {
    kw.push_back({f.mats[3 * e].View(), f.mats[3 * e + 1].View(), f.mats[3 * e + 2].View()});
  }
  std::vector<const cpu::ExpertWeights*> ptrs = {&kw[0], &kw[1], &kw[2]};
  std::vector<float> ref(tokens * kDim);
  ASSERT_TRUE(cpu::Moe({.x = x, .indices = idx, .weights = w, .experts = ptrs, .y = ref,
                        .tokens = tokens, .topk = topk, .swiglu_limit = 10.0f,
                        .bf16_boundaries = false})
                  .ok());
  // The kernel rounds the final sum to bf16 only with bf16_boundaries; compare
  // with a bf16-level tolerance (sgemm vs row-stable summation order).
  double diff = 0, scale = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    diff = std::max(diff, double{std::fabs(y[i] - ref[i])});
    scale = std::max(scale, double{std::fabs(ref[i])});
  }
  EXPECT_GT(scale, 0.1);
  EXPECT_LT(diff / scale, 2e-2);
}

TEST(LocalExpertExecutorTest, StepOrderAndBadIdsAreErrors) {
  Fixture f;
  CpuOps ops;
  LocalExpertExecutor exec(ops, f.weights, 10.0f);
  std::vector<float> x(kDim, 0.5f), y(kDim);
  const std::vector<int32_t> bad = {kExperts};
  const std::vector<int32_t> good = {1};
  const std::vector<float> w = {1.0f};
  EXPECT_EQ(exec.RunExperts().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(exec.Combine(y).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(exec.Dispatch(1, x, {.experts = bad, .weights = w, .tokens = 1, .topk = 1}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(exec.Dispatch(7, x, {.experts = good, .weights = w, .tokens = 1, .topk = 1}).code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(exec.Dispatch(1, x, {.experts = good, .weights = w, .tokens = 1, .topk = 1}).ok());
  EXPECT_EQ(exec.Dispatch(1, x, {.experts = good, .weights = w, .tokens = 1, .topk = 1}).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(exec.Combine(y).code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(exec.RunExperts().ok());
  ASSERT_TRUE(exec.Combine(y).ok());
  // A single routed expert with weight 1 is exactly that expert.
  std::vector<float> direct(kDim);
  ASSERT_TRUE(SwigluExpertForward(ops, f.weights.layers[1].ffn.experts[1], x, 1, w, 10.0f,
                                  direct).ok());
  EXPECT_EQ(y, direct);
}

TEST(ExpertLoadTest, CountsPerLayerAndExpert) {
  ExpertLoad load({3, 2});
  const std::vector<int32_t> e = {0, 2, 2, 1};
  const std::vector<float> w(4, 1.0f);
  load.Record(0, {.experts = e, .weights = w, .tokens = 2, .topk = 2});
  EXPECT_EQ(load.count(0, 2), 2);
  EXPECT_EQ(load.count(0, 1), 1);
  EXPECT_EQ(load.count(1, 1), 0);
  load.Reset();
  EXPECT_EQ(load.count(0, 2), 0);
}

}  // namespace
}  // namespace weir::model
