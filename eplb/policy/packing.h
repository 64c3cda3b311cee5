// eplb/policy/packing.h
//
// Packs items with per-window loads into bins of fixed capacity so that the
// sum over windows of the most loaded bin is small. Items busy in the same
// windows end in different bins, because the costs are computed on window
// vectors, not on totals.
//
// Thread safety: pure function; safe to call concurrently.

#ifndef WEIR_EPLB_POLICY_PACKING_H_
#define WEIR_EPLB_POLICY_PACKING_H_

#include <vector>

#include "absl/types/span.h"

namespace weir::eplb::policy {

// Returns the bin of every item [num_items], each bin holding exactly
// `capacity` items. Three steps: largest-first on totals (items by total load,
// descending, each to the open bin with the least total, ties to the lowest
// index); exchanges of two items between bins that lower the sum of squared
// bin loads over windows (a few sweeps; skipped when one item's total reaches
// the mean bin total, or above 2048 items; undone if it raised the
// objective), which puts items busy in the same windows in different bins;
// then exchanges while one lowers the objective by more than 1e-5 of its
// value. The result's objective is never above the largest-first start's.
// `loads` is [num_items, num_windows] row-major.
// Deterministic: the same input gives the same output.
// REQUIRES: num_bins >= 1, capacity >= 1, num_items == num_bins * capacity,
//           num_windows >= 1, loads.size() == num_items * num_windows,
//           loads finite and >= 0.
std::vector<int> PackBalanced(absl::Span<const double> loads, int num_items, int num_windows,
                              int num_bins, int capacity);

// Returns sum over windows of max over bins of the bin's load, for `bin_of`
// [num_items] as returned by PackBalanced (the packing objective).
double PackingObjective(absl::Span<const double> loads, int num_items, int num_windows,
                        int num_bins, absl::Span<const int> bin_of);

}  // namespace weir::eplb::policy

#endif  // WEIR_EPLB_POLICY_PACKING_H_
