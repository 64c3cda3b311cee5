// kernels/cpu/moe_expert_test.cc

#include "kernels/cpu/moe_expert.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"

namespace weir::kernels::cpu {
namespace {

// An fp32 [n, n] weight c * I (fp32 weights: no activation quantization).
struct Diag {
  std::vector<float> w;
  LinearWeight weight;
  Diag(int n, float c) : w(n * n, 0.0f) {
    for (int i = 0; i < n; ++i) w[i * n + i] = c;
    weight = {.format = WeightFormat::kF32, .out_features = n, .in_features = n, .f32 = w};
  }
};

float Silu(float g) { return g / (1.0f + std::exp(-g)); }

TEST(SwigluExpert, ClampsGateFromAboveAndUpBothSides) {
  Diag eye(3, 1.0f);
  ExpertWeights e{eye.weight, eye.weight, eye.weight};
  std::vector<float> x = {1.0f, 20.0f, -20.0f}, y(3);
  ASSERT_TRUE(SwigluExpert(e, {.x = x, .y = y, .rows = 1, .bf16_boundaries = false}).ok());
  EXPECT_FLOAT_EQ(y[0], 0.7310586f);          // silu(1) * 1
  EXPECT_FLOAT_EQ(y[1], Silu(10.0f) * 10.0f);  // both branches clamp to 10
  EXPECT_FLOAT_EQ(y[2], Silu(-20.0f) * -10.0f);  // gate keeps -20, up clamps to -10
  EXPECT_GT(y[2], 0.0f);
  ASSERT_TRUE(SwigluExpert(e, {.x = x, .y = y, .rows = 1, .swiglu_limit = 0.0f,
                               .bf16_boundaries = false}).ok());
  EXPECT_FLOAT_EQ(y[1], Silu(20.0f) * 20.0f);  // limit 0 disables the clamps
}

TEST(SwigluExpert, RouteWeightIsAppliedBeforeTheBf16RoundingOfTheW2Input) {
  Diag eye(1, 1.0f);
  ExpertWeights e{eye.weight, eye.weight, eye.weight};
  std::vector<float> x = {1.0f}, y(1), w = {0.3f};
  ASSERT_TRUE(SwigluExpert(e, {.x = x, .y = y, .rows = 1}).ok());
  EXPECT_EQ(y[0], 0.73046875f);  // bf16(silu(1)) = 187/256
  ASSERT_TRUE(SwigluExpert(e, {.x = x, .route_weight = w, .y = y, .rows = 1}).ok());
  // bf16(0.3 * 0.7310586) = bf16(0.2193176) = 225/1024; weighting after the
  // rounding would give bf16(0.3 * 0.73046875) = 224/1024.
  EXPECT_EQ(y[0], 0.2197265625f);
}

TEST(Moe, SumsRoutedExpertsAndShared) {
  const int dim = 2;
  Diag eye(dim, 1.0f), two(dim, 2.0f), three(dim, 3.0f), half(dim, 0.5f);
  ExpertWeights e0{eye.weight, two.weight, eye.weight};    // 2 * h
  ExpertWeights e1{eye.weight, three.weight, eye.weight};  // 3 * h
  ExpertWeights shared{eye.weight, half.weight, eye.weight};
  std::vector<const ExpertWeights*> experts = {&e0, &e1, nullptr};
  std::vector<float> x = {1.0f, 2.0f, -1.0f, 0.5f};  // 2 tokens
  std::vector<int32_t> idx = {1, 0, 0, 2};           // token 1 routes to expert 2 (not held)
  std::vector<float> w = {0.25f, 0.75f, 1.0f, 1.0f};
  std::vector<float> y(4);
  ASSERT_TRUE(Moe({.x = x, .indices = idx, .weights = w, .experts = experts, .shared = &shared,
                   .y = y, .tokens = 2, .topk = 2, .bf16_boundaries = false}).ok());
  auto h = [](float v) { return Silu(v) * v; };
  for (int c = 0; c < 2; ++c) {
    EXPECT_FLOAT_EQ(y[c], (0.25f * 3 + 0.75f * 2 + 0.5f) * h(x[c])) << c;
    EXPECT_FLOAT_EQ(y[2 + c], (1.0f * 2 + 0.5f) * h(x[2 + c])) << c;
  }
}

TEST(Moe, RejectsBadIndicesAndShapes) {
  Diag eye(2, 1.0f);
  ExpertWeights e0{eye.weight, eye.weight, eye.weight};
  std::vector<const ExpertWeights*> experts = {&e0};
  std::vector<float> x = {1.0f, 2.0f}, y(2), w = {1.0f};
  std::vector<int32_t> idx = {1};
  EXPECT_EQ(Moe({.x = x, .indices = idx, .weights = w, .experts = experts, .y = y, .tokens = 1,
                 .topk = 1}).code(),
            absl::StatusCode::kInvalidArgument);
  std::vector<float> w3(9, 1.0f);
  ExpertWeights bad = e0;
  bad.w2 = {.format = WeightFormat::kF32, .out_features = 3, .in_features = 3, .f32 = w3};
  EXPECT_EQ(SwigluExpert(bad, {.x = x, .y = y, .rows = 1}).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace weir::kernels::cpu
