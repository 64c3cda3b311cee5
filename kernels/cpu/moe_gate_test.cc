// kernels/cpu/moe_gate_test.cc

#include "kernels/cpu/moe_gate.h"

#include <vector>

#include "gtest/gtest.h"

namespace weir::kernels::cpu {
namespace {

// With dim 1 and x = 1, the gate weights are the logits.
struct OneToken {
  std::vector<float> x = {1.0f};
  std::vector<int32_t> idx;
  std::vector<float> w;
  absl::Status Run(const MoeGateParams& p, const std::vector<float>& logits,
                   const std::vector<float>& bias = {}) {
    idx.assign(p.topk, -1);
    w.assign(p.topk, 0.0f);
    return MoeGate(p, {.x = x, .weight = logits, .bias = bias, .indices = idx, .weights = w,
                       .tokens = 1, .dim = 1});
  }
};

TEST(MoeGate, SqrtSoftplusTopkNormalizedAndScaled) {
  // s = sqrt(log1p(exp(l))) for l = 0, 1, 2, -1: .83255, 1.14598, 1.45840, .55970.
  OneToken g;
  ASSERT_TRUE(g.Run({.num_experts = 4, .topk = 2}, {0.0f, 1.0f, 2.0f, -1.0f}).ok());
  EXPECT_EQ(g.idx, (std::vector<int32_t>{2, 1}));
  EXPECT_NEAR(g.w[0], 0.8399706f, 1e-6f);  // 1.5 * 1.45840 / (1.45840 + 1.14598)
  EXPECT_NEAR(g.w[1], 0.6600294f, 1e-6f);
}

TEST(MoeGate, BiasSelectsButDoesNotWeigh) {
  OneToken g;
  ASSERT_TRUE(g.Run({.num_experts = 4, .topk = 2}, {0.0f, 1.0f, 2.0f, -1.0f},
                    {0.0f, 0.0f, 0.0f, 10.0f}).ok());
  EXPECT_EQ(g.idx, (std::vector<int32_t>{3, 2}));
  EXPECT_NEAR(g.w[0], 0.4160091f, 1e-6f);  // 1.5 * .55970 / (.55970 + 1.45840)
  EXPECT_NEAR(g.w[1], 1.0839909f, 1e-6f);
}

TEST(MoeGate, SoftplusThresholdTemperatureAndTopOne) {
  OneToken g;
  // l = 25 > 20: softplus(l) = l exactly, s = 5; top-1 is not normalized.
  ASSERT_TRUE(g.Run({.num_experts = 2, .topk = 1}, {25.0f, 0.0f}).ok());
  EXPECT_EQ(g.idx[0], 0);
  EXPECT_EQ(g.w[0], 5.0f * 1.5f);
  // gate_temp 2 halves the logits: s(0.5) = .98695.
  ASSERT_TRUE(g.Run({.num_experts = 2, .topk = 1, .gate_temp = 2.0f}, {1.0f, -1.0f}).ok());
  EXPECT_NEAR(g.w[0], 1.5f * 0.9869534f, 1e-6f);
}

TEST(MoeGate, TiesGoToLowerIdAndImageTokensUseBiasVl) {
  const std::vector<float> x = {1.0f, 1.0f}, logits = {1.0f, 1.0f, 1.0f};
  const std::vector<float> bias = {0, 0, 0}, bias_vl = {0, 0, 5};
  const std::vector<uint8_t> image = {0, 1};
  std::vector<int32_t> idx(4);
  std::vector<float> w(4);
  ASSERT_TRUE(MoeGate({.num_experts = 3, .topk = 2},
                      {.x = x, .weight = logits, .bias = bias, .bias_vl = bias_vl,
                       .image_mask = image, .indices = idx, .weights = w, .tokens = 2, .dim = 1})
                  .ok());
  EXPECT_EQ(idx, (std::vector<int32_t>{0, 1, 2, 0}));
  EXPECT_FLOAT_EQ(w[0], 0.75f);  // equal scores split the route scale evenly
  EXPECT_FLOAT_EQ(w[3], 0.75f);
}

TEST(MoeGate, RejectsBadArgs) {
  OneToken g;
  EXPECT_EQ(g.Run({.num_experts = 2, .topk = 3}, {0.0f, 1.0f}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(g.Run({.num_experts = 3, .topk = 1}, {0.0f, 1.0f}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(g.Run({.num_experts = 2, .topk = 1, .gate_temp = 0.0f}, {0.0f, 1.0f}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(g.Run({.num_experts = 2, .topk = 1}, {0.0f, 1.0f}, {1.0f}).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace weir::kernels::cpu
