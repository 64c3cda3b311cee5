// eplb/policy/packing.cc
//
// Greedy LPT on window vectors, then best-improvement swaps out of the bins
// that attain some window's maximum. Hot loops use plain ints and raw rows.

#include "eplb/policy/packing.h"

#include <algorithm>
#include <numeric>

#include "base/logging.h"

namespace weir::eplb::policy {
namespace {

// Upper bound on swap evaluations (times num_windows) per call; keeps the
// worst case bounded while typical inputs converge well before it.
constexpr double kSwapWorkBudget = 4e7;
// Relative tolerance under which two costs count as equal.
constexpr double kRelTol = 1e-12;

class Packer {
 public:
  Packer(absl::Span<const double> loads, int n, int w, int b, int c)
      : loads_(loads),
        n_(n),
        w_(w),
        b_(b),
        c_(c),
        bin_load_(static_cast<size_t>(b) * w, 0.0),
        members_(b),
        bin_of_(n, -1) {}

  void Greedy();
  void LocalSearch();
  std::vector<int> TakeBins() { return std::move(bin_of_); }

 private:
  const double* Item(int i) const { return loads_.data() + static_cast<size_t>(i) * w_; }
  double* Bin(int b) { return bin_load_.data() + static_cast<size_t>(b) * w_; }
  void Place(int item, int bin);
  // Fills top_value_/top_bin_ with the three largest bin loads of each window.
  void ComputeTop3();

  absl::Span<const double> loads_;
  const int n_, w_, b_, c_;
  std::vector<double> bin_load_;           // [bins, windows]
  std::vector<std::vector<int>> members_;  // [bins][<= capacity]
  std::vector<int> bin_of_;                // [items]
  std::vector<double> top_value_;          // [windows, 3]
  std::vector<int> top_bin_;               // [windows, 3]
};

void Packer::Place(int item, int bin) {
  bin_of_[item] = bin;
  members_[bin].push_back(item);
  const double* x = Item(item);
  double* l = Bin(bin);
  for (int w = 0; w < w_; ++w) l[w] += x[w];
}

void Packer::Greedy() {
  std::vector<double> total(n_, 0.0);
  for (int i = 0; i < n_; ++i) total[i] = std::accumulate(Item(i), Item(i) + w_, 0.0);
  std::vector<int> order(n_);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return total[a] > total[b]; });
  std::vector<double> cur_max(w_, 0.0);
  for (const int item : order) {
    const double* x = Item(item);
    const double scale = std::accumulate(cur_max.begin(), cur_max.end(), total[item]);
    const double tol = kRelTol * scale;
    int best = -1;
    double best_inc = 0, best_dot = 0;
    for (int b = 0; b < b_; ++b) {
      if (static_cast<int>(members_[b].size()) == c_) continue;
      const double* l = Bin(b);
      double inc = 0, dot = 0;
      for (int w = 0; w < w_; ++w) {
        inc += std::max(0.0, l[w] + x[w] - cur_max[w]);
        dot += l[w] * x[w];
      }
      if (best < 0 || inc < best_inc - tol || (inc <= best_inc + tol && dot < best_dot)) {
        best = b;
        best_inc = inc;
        best_dot = dot;
      }
    }
    WEIR_CHECK(best >= 0) << "num_items == num_bins * capacity leaves a free slot";
    Place(item, best);
    const double* l = Bin(best);
    for (int w = 0; w < w_; ++w) cur_max[w] = std::max(cur_max[w], l[w]);
  }
}

void Packer::ComputeTop3() {
  top_value_.assign(static_cast<size_t>(w_) * 3, -1.0);
  top_bin_.assign(static_cast<size_t>(w_) * 3, -1);
  for (int b = 0; b < b_; ++b) {
    const double* l = Bin(b);
    for (int w = 0; w < w_; ++w) {
      double* v = &top_value_[static_cast<size_t>(w) * 3];
      int* id = &top_bin_[static_cast<size_t>(w) * 3];
      if (l[w] <= v[2]) continue;
      int k = 2;
      while (k > 0 && l[w] > v[k - 1]) {
        v[k] = v[k - 1];
        id[k] = id[k - 1];
        --k;
      }
      v[k] = l[w];
      id[k] = b;
    }
  }
}

void Packer::LocalSearch() {
  if (b_ < 2) return;
  std::vector<double> other(w_);
  std::vector<double> priority(b_);
  std::vector<int> candidates;
  double work = 0;
  while (work < kSwapWorkBudget) {
    ComputeTop3();
    double objective = 0;
    for (int w = 0; w < w_; ++w) objective += top_value_[static_cast<size_t>(w) * 3];
    const double min_gain = 1e-9 * objective;
    // Bins attaining some window's maximum, heaviest windows first.
    std::fill(priority.begin(), priority.end(), 0.0);
    for (int w = 0; w < w_; ++w) {
      const double top = top_value_[static_cast<size_t>(w) * 3];
      for (int k = 0; k < 3; ++k) {
        const int b = top_bin_[static_cast<size_t>(w) * 3 + k];
        if (b >= 0 && top > 0 &&
            top_value_[static_cast<size_t>(w) * 3 + k] >= top * (1 - kRelTol)) {
          priority[b] += top;
        }
      }
    }
    candidates.clear();
    for (int b = 0; b < b_; ++b) {
      if (priority[b] > 0) candidates.push_back(b);
    }
    std::stable_sort(candidates.begin(), candidates.end(),
                     [&](int a, int b) { return priority[a] > priority[b]; });
    bool swapped = false;
    for (const int p : candidates) {
      double best_delta = -min_gain;
      int best_a = -1, best_b = -1;
      const double* lp = Bin(p);
      for (int q = 0; q < b_; ++q) {
        if (q == p) continue;
        for (int w = 0; w < w_; ++w) {
          const size_t base = static_cast<size_t>(w) * 3;
          int k = 0;
          while (k < 3 && (top_bin_[base + k] == p || top_bin_[base + k] == q)) ++k;
          other[w] = k < 3 ? std::max(0.0, top_value_[base + k]) : 0.0;
        }
        const double* lq = Bin(q);
        for (const int a : members_[p]) {
          const double* xa = Item(a);
          for (const int b : members_[q]) {
            const double* xb = Item(b);
            double sum = 0;
            for (int w = 0; w < w_; ++w) {
              const double d = xb[w] - xa[w];
              sum += std::max(other[w], std::max(lp[w] + d, lq[w] - d));
            }
            if (sum - objective < best_delta) {
              best_delta = sum - objective;
              best_a = a;
              best_b = b;
            }
          }
        }
        work += static_cast<double>(members_[p].size()) * members_[q].size() * w_;
      }
      if (best_a < 0) continue;
      const int q = bin_of_[best_b];
      std::replace(members_[p].begin(), members_[p].end(), best_a, best_b);
      std::replace(members_[q].begin(), members_[q].end(), best_b, best_a);
      bin_of_[best_a] = q;
      bin_of_[best_b] = p;
      double* mp = Bin(p);
      double* mq = Bin(q);
      const double* xa = Item(best_a);
      const double* xb = Item(best_b);
      for (int w = 0; w < w_; ++w) {
        mp[w] += xb[w] - xa[w];
        mq[w] += xa[w] - xb[w];
      }
      swapped = true;
      break;
    }
    if (!swapped) break;
  }
}

}  // namespace

std::vector<int> PackBalanced(absl::Span<const double> loads, int num_items, int num_windows,
                              int num_bins, int capacity) {
  WEIR_CHECK(num_bins >= 1 && capacity >= 1 && num_windows >= 1 &&
             num_items == num_bins * capacity &&
             loads.size() == static_cast<size_t>(num_items) * num_windows)
      << "guaranteed by the policy's input validation";
  Packer packer(loads, num_items, num_windows, num_bins, capacity);
  packer.Greedy();
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
