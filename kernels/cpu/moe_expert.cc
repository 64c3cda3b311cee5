// kernels/cpu/moe_expert.cc

#include "kernels/cpu/moe_expert.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "kernels/cpu/quant.h"
#include "kernels/cpu/swiglu.h"

namespace weir::kernels::cpu {
namespace {

absl::Status CheckExpert(const ExpertWeights& e, int64_t dim) {
  const int64_t inter = e.w1.out_features;
  if (e.w1.in_features != dim || e.w3.in_features != dim || e.w3.out_features != inter ||
      e.w2.in_features != inter || e.w2.out_features != dim) {
    return absl::InvalidArgumentError(absl::StrCat(
        "expert shapes: w1 [", e.w1.out_features, ", ", e.w1.in_features, "] w3 [",
        e.w3.out_features, ", ", e.w3.in_features, "] w2 [", e.w2.out_features, ", ",
        e.w2.in_features, "] for dim ", dim));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status SwigluExpert(const ExpertWeights& expert, const SwigluExpertArgs& args) {
  const int64_t dim = expert.w1.in_features, inter = expert.w1.out_features, m = args.rows;
  RETURN_IF_ERROR(CheckExpert(expert, dim));
  if (m <= 0 || static_cast<int64_t>(args.x.size()) != m * dim ||
      static_cast<int64_t>(args.y.size()) != m * dim ||
      !(args.route_weight.empty() || static_cast<int64_t>(args.route_weight.size()) == m)) {
    return absl::InvalidArgumentError(absl::StrCat("SwigluExpert: x ", args.x.size(), " y ",
                                                   args.y.size(), " for rows ", m, " dim ", dim));
  }
  std::vector<float> gate(m * inter), up(m * inter);
  RETURN_IF_ERROR(Linear(expert.w1, {.x = args.x, .y = gate, .rows = m}));
  RETURN_IF_ERROR(Linear(expert.w3, {.x = args.x, .y = up, .rows = m}));
  if (args.bf16_boundaries) {
    RoundToBf16InPlace(gate);
    RoundToBf16InPlace(up);
  }
  SwigluRows(gate, up, args.route_weight, m, inter, args.swiglu_limit,
             [](float v) { return std::exp(v); });
  if (args.bf16_boundaries) RoundToBf16InPlace(gate);
  RETURN_IF_ERROR(Linear(expert.w2, {.x = gate, .y = args.y, .rows = m}));
  if (args.bf16_boundaries) RoundToBf16InPlace(args.y);
  return absl::OkStatus();
}

absl::Status Moe(const MoeArgs& args) {
  const int64_t t = args.tokens, k = args.topk;
  const int64_t n_experts = static_cast<int64_t>(args.experts.size());
  if (t <= 0 || k <= 0 || static_cast<int64_t>(args.indices.size()) != t * k ||
      static_cast<int64_t>(args.weights.size()) != t * k || args.x.size() != args.y.size() ||
      args.x.size() % t != 0) {
    return absl::InvalidArgumentError(absl::StrCat("Moe: bad shapes for tokens ", t, " topk ", k));
  }
  const int64_t dim = static_cast<int64_t>(args.x.size()) / t;
  for (int32_t e : args.indices) {
    if (e < 0 || e >= n_experts) {
      return absl::InvalidArgumentError(absl::StrCat("Moe: expert index ", e, " of ", n_experts));
    }
  }
  std::vector<float> acc(t * dim, 0.0f);
  std::vector<float> xs, ws, ys;
  std::vector<int64_t> rows;
  for (int64_t e = 0; e < n_experts; ++e) {
    const ExpertWeights* expert = args.experts[e];
    if (expert == nullptr) continue;
    rows.clear();
    ws.clear();
    for (int64_t i = 0; i < t * k; ++i) {
      if (args.indices[i] != e) continue;
      rows.push_back(i / k);
      ws.push_back(args.weights[i]);
    }
    if (rows.empty()) continue;
    const int64_t m = static_cast<int64_t>(rows.size());
    xs.resize(m * dim);
    ys.resize(m * dim);
    for (int64_t r = 0; r < m; ++r) {
      std::copy_n(args.x.data() + rows[r] * dim, dim, xs.data() + r * dim);
    }
    RETURN_IF_ERROR(SwigluExpert(*expert, {.x = xs, .route_weight = ws, .y = ys, .rows = m,
                                           .swiglu_limit = args.swiglu_limit,
                                           .bf16_boundaries = args.bf16_boundaries}))
        << "routed expert " << e;
    for (int64_t r = 0; r < m; ++r) {
      for (int64_t c = 0; c < dim; ++c) acc[rows[r] * dim + c] += ys[r * dim + c];
    }
  }
  if (args.shared != nullptr) {
    ys.resize(t * dim);
    RETURN_IF_ERROR(SwigluExpert(*args.shared, {.x = args.x, .y = ys, .rows = t,
                                                .swiglu_limit = args.swiglu_limit,
                                                .bf16_boundaries = args.bf16_boundaries}))
        << "shared expert";
    for (int64_t i = 0; i < t * dim; ++i) acc[i] += ys[i];
  }
  std::copy(acc.begin(), acc.end(), args.y.begin());
  if (args.bf16_boundaries) RoundToBf16InPlace(args.y);
  return absl::OkStatus();
}

}  // namespace weir::kernels::cpu
