// eplb/policy/expert_load.cc

#include "eplb/policy/expert_load.h"

#include <cmath>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace weir::eplb::policy {
namespace {

absl::Status CheckShape(int64_t num_windows, int64_t num_layers, int64_t num_logical, size_t size) {
  for (const int64_t dim : {num_windows, num_layers, num_logical}) {
    if (dim < 1 || dim > kMaxDim) {
      return absl::InvalidArgumentError(
          absl::StrCat("expert load: dimension ", dim, " outside [1, ", kMaxDim, "]"));
    }
  }
  const int64_t n = num_windows * num_layers;  // Both <= 2^20: no overflow.
  if (n > kMaxElements / num_logical) {
    return absl::InvalidArgumentError(
        absl::StrCat("expert load: more than ", kMaxElements, " elements"));
  }
  if (static_cast<size_t>(n * num_logical) != size) {
    return absl::InvalidArgumentError(absl::StrCat("expert load: shape [", num_windows, ", ",
                                                   num_layers, ", ", num_logical, "] needs ",
                                                   n * num_logical, " values, got ", size));
  }
  return absl::OkStatus();
}

template <typename T>
absl::StatusOr<std::vector<double>> ToDoubles(absl::Span<const T> in) {
  std::vector<double> out(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    const double v = static_cast<double>(in[i]);
    if (!std::isfinite(v) || v < 0 || v > kMaxLoadValue) {
      return absl::InvalidArgumentError(absl::StrCat("expert load: value ", v, " at flat index ", i,
                                                     " is negative, too large or not finite"));
    }
    out[i] = v;
  }
  return out;
}

}  // namespace

absl::StatusOr<ExpertLoad> ExpertLoad::FromCounts(int64_t num_windows, int64_t num_layers,
                                                  int64_t num_logical_experts,
                                                  absl::Span<const int64_t> counts) {
  return Build(num_windows, num_layers, num_logical_experts, counts);
}

absl::StatusOr<ExpertLoad> ExpertLoad::FromFloats(int64_t num_windows, int64_t num_layers,
                                                  int64_t num_logical_experts,
                                                  absl::Span<const float> loads) {
  return Build(num_windows, num_layers, num_logical_experts, loads);
}

absl::StatusOr<ExpertLoad> ExpertLoad::FromDoubles(int64_t num_windows, int64_t num_layers,
                                                   int64_t num_logical_experts,
                                                   absl::Span<const double> loads) {
  return Build(num_windows, num_layers, num_logical_experts, loads);
}

template <typename T>
absl::StatusOr<ExpertLoad> ExpertLoad::Build(int64_t num_windows, int64_t num_layers,
                                             int64_t num_logical, absl::Span<const T> values) {
  RETURN_IF_ERROR(CheckShape(num_windows, num_layers, num_logical, values.size()));
  ASSIGN_OR_RETURN(std::vector<double> converted, ToDoubles(values));
  return ExpertLoad(static_cast<int>(num_windows), static_cast<int>(num_layers),
                    static_cast<int>(num_logical), std::move(converted));
}

std::vector<double> ExpertLoad::LayerByExpert(int layer) const {
  std::vector<double> out(static_cast<size_t>(num_logical_) * num_windows_);
  for (int w = 0; w < num_windows_; ++w) {
    for (int e = 0; e < num_logical_; ++e) {
      out[static_cast<size_t>(e) * num_windows_ + w] = at(w, layer, e);
    }
  }
  return out;
}

}  // namespace weir::eplb::policy
