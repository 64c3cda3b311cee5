// kernels/cpu/mhc.cc

#include "kernels/cpu/mhc.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "kernels/common/fmath.h"
#include "kernels/common/numeric_formats.h"
#include "kernels/cpu/linear.h"

namespace weir::kernels::cpu {
namespace {

using fmath::SigmoidF;

template <typename T>
bool Sized(std::span<T> s, int64_t n) {
  return static_cast<int64_t>(s.size()) == n;
}

}  // namespace

absl::Status HcSplitSinkhorn(const HcParams& params, std::span<const float> mixes,
                             std::span<const float> scale, std::span<const float> base,
                             std::span<float> pre, std::span<float> post, std::span<float> comb) {
  const int n = params.hc_mult;
  const int64_t n_mix = static_cast<int64_t>(2 + n) * n;
  if (n < 1 || params.sinkhorn_iters < 1 || !Sized(mixes, n_mix) || !Sized(scale, 3) ||
      !Sized(base, n_mix) || !Sized(pre, n) || !Sized(post, n) || !Sized(comb, n * n)) {
    return absl::InvalidArgumentError(
        absl::StrCat("HcSplitSinkhorn: hc_mult ", n, " iters ", params.sinkhorn_iters,
                     " mixes ", mixes.size(), " base ", base.size()));
  }
  const float eps = params.hc_eps;
  for (int j = 0; j < n; ++j) {
    pre[j] = SigmoidF(mixes[j] * scale[0] + base[j]) + eps;
    post[j] = 2.0f * SigmoidF(mixes[n + j] * scale[1] + base[n + j]);
  }
  for (int j = 0; j < n; ++j) {  // row softmax over k
    float* row = comb.data() + j * n;
    for (int k = 0; k < n; ++k) row[k] = mixes[2 * n + j * n + k] * scale[2] + base[2 * n + j * n + k];
    const float m = *std::max_element(row, row + n);
    float sum = 0.0f;
    for (int k = 0; k < n; ++k) sum += (row[k] = fmath::ExpF(row[k] - m));
    for (int k = 0; k < n; ++k) row[k] = row[k] / sum + eps;
  }
  auto normalize_columns = [&] {
    for (int k = 0; k < n; ++k) {
      float sum = 0.0f;
      for (int j = 0; j < n; ++j) sum += comb[j * n + k];
      for (int j = 0; j < n; ++j) comb[j * n + k] /= (sum + eps);
    }
  };
  normalize_columns();
  for (int it = 1; it < params.sinkhorn_iters; ++it) {
    for (int j = 0; j < n; ++j) {
      float sum = 0.0f;
      for (int k = 0; k < n; ++k) sum += comb[j * n + k];
      for (int k = 0; k < n; ++k) comb[j * n + k] /= (sum + eps);
    }
    normalize_columns();
  }
  return absl::OkStatus();
}

absl::Status HcMix(const HcParams& params, const HcMixArgs& args) {
  const int n = params.hc_mult;
  const int64_t t = args.tokens, d = args.dim, n_mix = static_cast<int64_t>(2 + n) * n;
  if (n < 1 || t <= 0 || d <= 0 || !Sized(args.x, t * n * d) || !Sized(args.hc_fn, n_mix * n * d) ||
      !Sized(args.pre, t * n) || !Sized(args.post, t * n) || !Sized(args.comb, t * n * n)) {
    return absl::InvalidArgumentError(absl::StrCat("HcMix: bad shapes for tokens ", t, " hc ", n,
                                                   " dim ", d));
  }
  std::vector<float> mixes(t * n_mix);
  LinearWeight fn{.format = WeightFormat::kF32, .out_features = n_mix, .in_features = n * d,
                  .f32 = args.hc_fn};
  RETURN_IF_ERROR(Linear(fn, {.x = args.x, .y = mixes, .rows = t, .act_quant = ActQuant::kNone}));
  return HcMixFromProducts(params, args, mixes);
}

absl::Status HcMixFromProducts(const HcParams& params, const HcMixArgs& args,
                               std::span<float> mixes) {
  const int n = params.hc_mult;
  const int64_t t = args.tokens, d = args.dim, n_mix = static_cast<int64_t>(2 + n) * n;
  if (!Sized(mixes, t * n_mix)) {
    return absl::InvalidArgumentError(absl::StrCat("HcMixFromProducts: ", mixes.size(),
                                                   " mixes for tokens ", t));
  }
  for (int64_t i = 0; i < t; ++i) {
    const float* v = args.x.data() + i * n * d;
    const double sum_sq = fmath::LaneSumSquares(v, n * d);
    const float mean = static_cast<float>(sum_sq) / static_cast<float>(n * d);
    const float rsqrt = 1.0f / std::sqrt(mean + params.norm_eps);
    std::span<float> m(mixes.data() + i * n_mix, n_mix);
    for (float& value : m) value *= rsqrt;
    RETURN_IF_ERROR(HcSplitSinkhorn(params, m, args.scale, args.base, args.pre.subspan(i * n, n),
                                    args.post.subspan(i * n, n),
                                    args.comb.subspan(i * n * n, n * n)));
  }
  return absl::OkStatus();
}

absl::Status HcCollapse(std::span<const float> x, std::span<const float> pre, int64_t tokens,
                        int hc_mult, int64_t dim, bool bf16_boundaries, std::span<float> out) {
  const int64_t n = hc_mult;
  if (n < 1 || tokens <= 0 || dim <= 0 || !Sized(x, tokens * n * dim) ||
      !Sized(pre, tokens * n) || !Sized(out, tokens * dim)) {
    return absl::InvalidArgumentError(absl::StrCat("HcCollapse: bad shapes"));
  }
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t c = 0; c < dim; ++c) {
      float acc = 0.0f;
      for (int64_t j = 0; j < n; ++j) acc += pre[t * n + j] * x[(t * n + j) * dim + c];
      out[t * dim + c] = bf16_boundaries ? RoundToBf16(acc) : acc;
    }
  }
  return absl::OkStatus();
}

absl::Status HcExpand(std::span<const float> x, std::span<const float> y,
                      std::span<const float> post, std::span<const float> comb, int64_t tokens,
                      int hc_mult, int64_t dim, bool bf16_boundaries, std::span<float> out) {
  const int64_t n = hc_mult;
  if (n < 1 || tokens <= 0 || dim <= 0 || !Sized(x, tokens * n * dim) ||
      !Sized(out, tokens * n * dim) || !Sized(y, tokens * dim) || !Sized(post, tokens * n) ||
      !Sized(comb, tokens * n * n)) {
    return absl::InvalidArgumentError(absl::StrCat("HcExpand: bad shapes"));
  }
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t k = 0; k < n; ++k) {
      for (int64_t c = 0; c < dim; ++c) {
        float mixed = 0.0f;
        for (int64_t j = 0; j < n; ++j) mixed += comb[(t * n + j) * n + k] * x[(t * n + j) * dim + c];
        const float v = post[t * n + k] * y[t * dim + c] + mixed;
        out[(t * n + k) * dim + c] = bf16_boundaries ? RoundToBf16(v) : v;
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace weir::kernels::cpu
