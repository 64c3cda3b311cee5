// kernels/cpu/rms_norm.cc

#include "kernels/cpu/rms_norm.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "kernels/common/fmath.h"

namespace weir::kernels::cpu {

absl::Status RmsNorm(const RmsNormArgs& args) {
  const int64_t rows = args.rows, dim = args.dim;
  if (rows <= 0 || dim <= 0 || !(args.eps >= 0.0f)) {
    return absl::InvalidArgumentError(
        absl::StrCat("RmsNorm: bad rows ", rows, " dim ", dim, " eps ", args.eps));
  }
  const size_t n = static_cast<size_t>(rows * dim);
  if (args.x.size() != n || args.out.size() != n ||
      (!args.weight.empty() && static_cast<int64_t>(args.weight.size()) != dim)) {
    return absl::InvalidArgumentError(absl::StrCat("RmsNorm: spans do not match [", rows, ", ",
                                                   dim, "] (x ", args.x.size(), ", out ",
                                                   args.out.size(), ", weight ",
                                                   args.weight.size(), ")"));
  }
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = args.x.data() + r * dim;
    float* y = args.out.data() + r * dim;
    const double sum_sq = fmath::LaneSumSquares(x, dim);
    const float var = static_cast<float>(sum_sq) / static_cast<float>(dim);
    const float inv = 1.0f / std::sqrt(var + args.eps);
    for (int64_t i = 0; i < dim; ++i) {
      const float normed = x[i] * inv;
      y[i] = args.weight.empty() ? normed : args.weight[i] * normed;
    }
  }
  return absl::OkStatus();
}

}  // namespace weir::kernels::cpu
