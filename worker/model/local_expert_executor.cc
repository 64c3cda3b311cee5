#include "worker/model/local_expert_executor.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "worker/model/expert_ffn.h"

namespace weir::model {

absl::Status LocalExpertExecutor::Dispatch(int layer, std::span<const float> x,
                                           const ExpertAssignments& a) {
  if (phase_ != Phase::kIdle) return absl::FailedPreconditionError("Dispatch: step open");
  if (layer < 0 || layer >= static_cast<int>(weights_.layers.size())) {
    return absl::InvalidArgumentError(absl::StrCat("Dispatch: layer ", layer));
  }
  const std::vector<ExpertWeightsF32>& experts = weights_.layers[layer].ffn.experts;
  const int64_t n = static_cast<int64_t>(experts.size());
  const int64_t dim = experts.empty() ? 0 : experts[0].w1.in;
  if (a.tokens <= 0 || a.topk <= 0 || static_cast<int64_t>(a.experts.size()) != a.tokens * a.topk ||
      a.weights.size() != a.experts.size() ||
      static_cast<int64_t>(x.size()) != a.tokens * dim) {
    return absl::InvalidArgumentError("Dispatch: bad shapes");
  }
  for (int32_t e : a.experts) {
    if (e < 0 || e >= n) {
      return absl::InvalidArgumentError(absl::StrCat("Dispatch: expert ", e, " of ", n));
    }
  }
  work_.assign(n, Work{});
  for (int64_t i = 0; i < a.tokens * a.topk; ++i) {
    Work& w = work_[a.experts[i]];
    w.rows.push_back(i / a.topk);
    w.weights.push_back(a.weights[i]);
  }
  layer_ = layer;
  x_ = x;
  tokens_ = a.tokens;
  phase_ = Phase::kDispatched;
  return absl::OkStatus();
}

absl::Status LocalExpertExecutor::RunExperts() {
  if (phase_ != Phase::kDispatched) return absl::FailedPreconditionError("RunExperts: no step");
  const std::vector<ExpertWeightsF32>& experts = weights_.layers[layer_].ffn.experts;
  const int64_t dim = experts[0].w1.in;
  std::vector<float> xs;
  for (size_t e = 0; e < work_.size(); ++e) {
    Work& w = work_[e];
    if (w.rows.empty()) continue;
    const int64_t m = static_cast<int64_t>(w.rows.size());
    xs.resize(m * dim);
    for (int64_t r = 0; r < m; ++r) {
      std::copy_n(x_.data() + w.rows[r] * dim, dim, xs.data() + r * dim);
    }
    w.out.resize(m * dim);
    absl::Status st = SwigluExpertForward(ops_, experts[e], xs, m, w.weights, swiglu_limit_, w.out);
    if (!st.ok()) {
      phase_ = Phase::kIdle;
      return absl::Status(st.code(), absl::StrCat("layer ", layer_, " expert ", e, ": ",
                                                  st.message()));
    }
  }
  phase_ = Phase::kRan;
  return absl::OkStatus();
}

absl::Status LocalExpertExecutor::Combine(std::span<float> y) {
  if (phase_ != Phase::kRan) return absl::FailedPreconditionError("Combine: experts not run");
  const int64_t dim = static_cast<int64_t>(x_.size()) / tokens_;
  if (static_cast<int64_t>(y.size()) != tokens_ * dim) {
    return absl::InvalidArgumentError("Combine: y size");
  }
  std::fill(y.begin(), y.end(), 0.0f);
  for (const Work& w : work_) {  // ascending expert id
    for (size_t r = 0; r < w.rows.size(); ++r) {
      float* dst = y.data() + w.rows[r] * dim;
      const float* src = w.out.data() + r * dim;
      for (int64_t c = 0; c < dim; ++c) dst[c] += src[c];
    }
  }
  phase_ = Phase::kIdle;
  work_.clear();
  return absl::OkStatus();
}

}  // namespace weir::model
