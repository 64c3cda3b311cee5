// eplb/policy/expert_load.h
//
// ExpertLoad: how much work each logical expert of each MoE layer received in
// each observation window, as a dense tensor [num_windows, num_layers,
// num_logical_experts]. The input of every placement policy.
//
// Thread safety: immutable after construction; safe to share between threads.

#ifndef WEIR_EPLB_POLICY_EXPERT_LOAD_H_
#define WEIR_EPLB_POLICY_EXPERT_LOAD_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace weir::eplb::policy {

// Upper bound on every dimension and on the element count, so that products
// of dimensions fit comfortably in int64 and a malformed request cannot ask
// for an absurd allocation.
inline constexpr int64_t kMaxDim = int64_t{1} << 20;
inline constexpr int64_t kMaxElements = int64_t{1} << 28;
// Upper bound on one load value, so that sums over a whole tensor stay finite.
inline constexpr double kMaxLoadValue = 1e18;

class ExpertLoad {
 public:
  // Builds a load tensor from token counts `counts` [num_windows, num_layers,
  // num_logical_experts], row-major.
  // Returns INVALID_ARGUMENT if a dimension is < 1 or > kMaxDim, the element
  // count exceeds kMaxElements or differs from counts.size(), or a count is
  // negative or above kMaxLoadValue.
  static absl::StatusOr<ExpertLoad> FromCounts(int64_t num_windows, int64_t num_layers,
                                               int64_t num_logical_experts,
                                               absl::Span<const int64_t> counts);

  // Same as FromCounts for fractional loads (e.g. averaged counts). Also
  // returns INVALID_ARGUMENT for NaN or infinite values.
  static absl::StatusOr<ExpertLoad> FromFloats(int64_t num_windows, int64_t num_layers,
                                               int64_t num_logical_experts,
                                               absl::Span<const float> loads);
  static absl::StatusOr<ExpertLoad> FromDoubles(int64_t num_windows, int64_t num_layers,
                                                int64_t num_logical_experts,
                                                absl::Span<const double> loads);

  int num_windows() const { return num_windows_; }
  int num_layers() const { return num_layers_; }
  int num_logical_experts() const { return num_logical_; }

  // Load of logical expert `expert` of layer `layer` in window `window`.
  // REQUIRES: indices in range.
  double at(int window, int layer, int expert) const {
    return values_[(static_cast<int64_t>(window) * num_layers_ + layer) * num_logical_ + expert];
  }

  // The load of one layer transposed to [num_logical_experts, num_windows]
  // (each expert's window vector contiguous), the layout the policies use.
  // REQUIRES: 0 <= layer < num_layers().
  std::vector<double> LayerByExpert(int layer) const;

 private:
  template <typename T>
  static absl::StatusOr<ExpertLoad> Build(int64_t num_windows, int64_t num_layers,
                                          int64_t num_logical, absl::Span<const T> values);

  ExpertLoad(int num_windows, int num_layers, int num_logical, std::vector<double> values)
      : num_windows_(num_windows),
        num_layers_(num_layers),
        num_logical_(num_logical),
        values_(std::move(values)) {}

  int num_windows_;
  int num_layers_;
  int num_logical_;
  std::vector<double> values_;  // [num_windows, num_layers, num_logical]
};

}  // namespace weir::eplb::policy

#endif  // WEIR_EPLB_POLICY_EXPERT_LOAD_H_
