// eplb/policy/packing.cc
//
// PackBalanced: largest-first start, variance descent
// (packing_variance.cc), then the swap search on the objective
// (packing_swaps.cc). Hot loops use plain ints and raw rows.

#include "eplb/policy/packing.h"

#include <algorithm>
#include <numeric>

#include "base/logging.h"
#include "eplb/policy/packer.h"

namespace weir::eplb::policy {
namespace internal {

void Packer::Place(int item, int bin) {
  bin_of_[item] = bin;
  members_[bin].push_back(item);
  const double* x = Item(item);
  double* l = Bin(bin);
  for (int w = 0; w < w_; ++w) l[w] += x[w];
}

void Packer::Exchange(int a, int b) {
  const int p = bin_of_[a];
  const int q = bin_of_[b];
  std::replace(members_[p].begin(), members_[p].end(), a, b);
  std::replace(members_[q].begin(), members_[q].end(), b, a);
  bin_of_[a] = q;
  bin_of_[b] = p;
  double* lp = Bin(p);
  double* lq = Bin(q);
  const double* xa = Item(a);
  const double* xb = Item(b);
  for (int w = 0; w < w_; ++w) {
    lp[w] += xb[w] - xa[w];
    lq[w] += xa[w] - xb[w];
  }
}

void Packer::Assign(const std::vector<int>& bin_of) {
  std::fill(bin_load_.begin(), bin_load_.end(), 0.0);
  for (std::vector<int>& m : members_) m.clear();
  for (int i = 0; i < n_; ++i) Place(i, bin_of[i]);
}

void Packer::LargestFirst() {
  std::vector<double> total(n_, 0.0);
  for (int i = 0; i < n_; ++i) total[i] = std::accumulate(Item(i), Item(i) + w_, 0.0);
  std::vector<int> order(n_);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return total[a] > total[b]; });
  std::vector<double> bin_total(b_, 0.0);
  for (const int item : order) {
    int best = -1;
    for (int b = 0; b < b_; ++b) {
      if (static_cast<int>(members_[b].size()) == c_) continue;
      if (best < 0 || bin_total[b] < bin_total[best]) best = b;
    }
    WEIR_CHECK(best >= 0) << "num_items == num_bins * capacity leaves a free slot";
    Place(item, best);
    bin_total[best] += total[item];
  }
}

double Packer::Objective() const {
  double objective = 0;
  for (int w = 0; w < w_; ++w) {
    double top = 0;
    for (int b = 0; b < b_; ++b) top = std::max(top, Bin(b)[w]);
    objective += top;
  }
  return objective;
}

bool Packer::HasDominantItem() const {
  double sum = 0, largest = 0;
  for (int i = 0; i < n_; ++i) {
    const double total = std::accumulate(Item(i), Item(i) + w_, 0.0);
    sum += total;
    largest = std::max(largest, total);
  }
  return largest > 0 && largest >= sum / b_;
}

void Packer::ComputeTop3() {
  top_value_.assign(static_cast<size_t>(w_) * 3, -1.0);
  top_bin_.assign(static_cast<size_t>(w_) * 3, -1);
  for (int w = 0; w < w_; ++w) RecomputeTop3(w);
}

void Packer::RecomputeTop3(int w) {
  double* v = &top_value_[static_cast<size_t>(w) * 3];
  int* id = &top_bin_[static_cast<size_t>(w) * 3];
  v[0] = v[1] = v[2] = -1.0;
  id[0] = id[1] = id[2] = -1;
  for (int b = 0; b < b_; ++b) {
    const double load = bin_load_[static_cast<size_t>(b) * w_ + w];
    if (load <= v[2]) continue;
    int k = 2;
    while (k > 0 && load > v[k - 1]) {
      v[k] = v[k - 1];
      id[k] = id[k - 1];
      --k;
    }
    v[k] = load;
    id[k] = b;
  }
}

void Packer::UpdateTop3(int p, int q) {
  const double* lp = Bin(p);
  const double* lq = Bin(q);
  for (int w = 0; w < w_; ++w) {
    const size_t base = static_cast<size_t>(w) * 3;
    const int* id = &top_bin_[base];
    const bool listed =
        id[0] == p || id[1] == p || id[2] == p || id[0] == q || id[1] == q || id[2] == q;
    if (listed || lp[w] > top_value_[base + 2] || lq[w] > top_value_[base + 2]) {
      RecomputeTop3(w);
    }
  }
}

}  // namespace internal

using internal::Packer;

std::vector<int> PackBalanced(absl::Span<const double> loads, int num_items, int num_windows,
                              int num_bins, int capacity) {
  WEIR_CHECK(num_bins >= 1 && capacity >= 1 && num_windows >= 1 &&
             num_items == num_bins * capacity &&
             loads.size() == static_cast<size_t>(num_items) * num_windows)
      << "guaranteed by the policy's input validation";
  Packer packer(loads, num_items, num_windows, num_bins, capacity);
  packer.LargestFirst();
  if (num_items <= internal::kMaxVarianceItems && !packer.HasDominantItem()) {
    // The descent spreads load evenly, which usually lowers the objective but
    // need not: keep the start if it does not.
    const std::vector<int> start = packer.bins();
    const double start_objective = packer.Objective();
    if (packer.BalanceVariance(internal::kVarianceSweeps) > 0 &&
        packer.Objective() > start_objective) {
      packer.Assign(start);
    }
  }
  packer.LocalSearch();
  return packer.TakeBins();
}

double PackingObjective(absl::Span<const double> loads, int num_items, int num_windows,
                        int num_bins, absl::Span<const int> bin_of) {
  std::vector<double> bin_load(static_cast<size_t>(num_bins) * num_windows, 0.0);
  for (int i = 0; i < num_items; ++i) {
    for (int w = 0; w < num_windows; ++w) {
      bin_load[static_cast<size_t>(bin_of[i]) * num_windows + w] +=
          loads[static_cast<size_t>(i) * num_windows + w];
    }
  }
  double objective = 0;
  for (int w = 0; w < num_windows; ++w) {
    double top = 0;
    for (int b = 0; b < num_bins; ++b) {
      top = std::max(top, bin_load[static_cast<size_t>(b) * num_windows + w]);
    }
    objective += top;
  }
  return objective;
}

}  // namespace weir::eplb::policy
