// kernels/cpu/moe_gate.cc

#include "kernels/cpu/moe_gate.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "kernels/common/fmath.h"

namespace weir::kernels::cpu {
namespace {

void Score(ScoreFunc func, std::span<float> row) {
  switch (func) {
    case ScoreFunc::kSqrtSoftplus:
      for (float& l : row) l = std::sqrt(l > 20.0f ? l : fmath::Log1pF(fmath::ExpF(l)));
      break;
    case ScoreFunc::kSigmoid:
      for (float& l : row) l = fmath::SigmoidF(l);
      break;
    case ScoreFunc::kSoftmax: {
      const float m = *std::max_element(row.begin(), row.end());
      float sum = 0.0f;
      for (float& l : row) sum += (l = fmath::ExpF(l - m));
      for (float& l : row) l /= sum;
      break;
    }
  }
}

}  // namespace

absl::Status MoeGate(const MoeGateParams& params, const MoeGateArgs& args) {
  const int64_t t = args.tokens, d = args.dim, e = params.num_experts, k = params.topk;
  auto sized = [](auto span, int64_t n) { return static_cast<int64_t>(span.size()) == n; };
  if (t <= 0 || d <= 0 || e <= 0 || k < 1 || k > e || !(params.gate_temp > 0.0f) ||
      !sized(args.x, t * d) || !sized(args.weight, e * d) ||
      !(args.bias.empty() || sized(args.bias, e)) ||
      !(args.bias_vl.empty() || sized(args.bias_vl, e)) ||
      !(args.image_mask.empty() || sized(args.image_mask, t)) || !sized(args.indices, t * k) ||
      !sized(args.weights, t * k)) {
    return absl::InvalidArgumentError(absl::StrCat("MoeGate: inconsistent shapes (tokens ", t,
                                                   ", dim ", d, ", experts ", e, ", topk ", k,
                                                   ")"));
  }
  // Gate logits in the fixed LaneDot order (batch-invariant, and the order
  // the CUDA kernel reproduces).
  std::vector<float> scores(t * e);
  for (int64_t i = 0; i < t; ++i) {
    for (int64_t j = 0; j < e; ++j) {
      scores[i * e + j] = fmath::LaneDot(args.x.data() + i * d, args.weight.data() + j * d, d);
    }
  }
  std::vector<float> biased(e);
  std::vector<int32_t> order(e);
  for (int64_t i = 0; i < t; ++i) {
    std::span<float> row(scores.data() + i * e, e);
    for (float& l : row) l /= params.gate_temp;
    Score(params.score_func, row);
    const bool image = !args.image_mask.empty() && args.image_mask[i] != 0;
    std::span<const float> bias = (image && !args.bias_vl.empty()) ? args.bias_vl : args.bias;
    for (int64_t j = 0; j < e; ++j) biased[j] = row[j] + (bias.empty() ? 0.0f : bias[j]);
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
      return biased[a] > biased[b] || (biased[a] == biased[b] && a < b);
    });
    int32_t* idx = args.indices.data() + i * k;
    float* wt = args.weights.data() + i * k;
    float sum = 0.0f;
    for (int64_t j = 0; j < k; ++j) {
      idx[j] = order[j];
      wt[j] = row[order[j]];
      sum += wt[j];
    }
    const bool normalize = params.norm_topk_prob && k > 1;
    for (int64_t j = 0; j < k; ++j) {
      if (normalize) wt[j] /= (sum + 1e-20f);
      wt[j] *= params.route_scale;
    }
  }
  return absl::OkStatus();
}

}  // namespace weir::kernels::cpu
