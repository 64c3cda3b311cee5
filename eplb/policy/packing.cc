// eplb/policy/packing.cc
//
// Greedy LPT on window vectors, then best-improvement swaps out of the bins
// that attain some window's maximum. Hot loops use plain ints and raw rows.

#include "eplb/policy/packing.h"

#include <algorithm>
#include <limits>
#include <numeric>

#include "base/logging.h"

namespace weir::eplb::policy {
namespace {

// Upper bound on swap evaluations (times num_windows) per call; keeps the
// worst case bounded while typical inputs converge well before it.
constexpr double kSwapWorkBudget = 4e7;
// Relative tolerance under which two costs count as equal.
constexpr double kRelTol = 1e-12;
// A swap must lower the objective by this fraction to be applied: smaller
// gains are within the noise of the loads and cost most of the search time.
constexpr double kMinRelGain = 1e-5;

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
        bin_of_(n, -1),
        unique_max_windows_(b),
        their_sum_(n, 0.0) {}

  void Greedy();
  void LocalSearch();
  std::vector<int> TakeBins() { return std::move(bin_of_); }

 private:
  const double* Item(int i) const { return loads_.data() + static_cast<size_t>(i) * w_; }
  double* Bin(int b) { return bin_load_.data() + static_cast<size_t>(b) * w_; }
  void Place(int item, int bin);
  // Fills top_value_/top_bin_ with the three largest bin loads of each window.
  void ComputeTop3();
  void RecomputeTop3(int w);
  // Refreshes the windows whose top three may have changed after bins `p`
  // and `q` exchanged items.
  void UpdateTop3(int p, int q);
  double Top(int w) const { return top_value_[static_cast<size_t>(w) * 3]; }
  double Gap(const std::vector<int>& windows) const {
    double gap = 0;
    for (const int w : windows)
      gap += Top(w) - std::max(0.0, top_value_[static_cast<size_t>(w) * 3 + 1]);
    return gap;
  }
  double Headroom(const double* load, const std::vector<int>& windows) const {
    double headroom = 0;
    for (const int w : windows) headroom += Top(w) - load[w];
    return headroom;
  }
  static double WindowSum(const double* x, const std::vector<int>& windows) {
    double sum = 0;
    for (const int w : windows) sum += x[w];
    return sum;
  }
  // The bin that alone holds window w's maximum load, or -1 on a tie.
  int UniqueMaxBin(int w) const {
    const size_t base = static_cast<size_t>(w) * 3;
    return top_value_[base] > top_value_[base + 1] ? top_bin_[base] : -1;
  }
  // Applies an exchange of an item of bin `p` with an item of another bin
  // that lowers the objective by more than `min_gain`: partner bins are tried
  // by decreasing room below the maximum in p's windows, and the best
  // exchange with the first partner that has one is applied.
  // Returns the other bin of the swap, or -1 if none. Adds the work done to
  // `work`.
  int ImproveBin(int p, double min_gain, double& work);

  absl::Span<const double> loads_;
  const int n_, w_, b_, c_;
  std::vector<double> bin_load_;                      // [bins, windows]
  std::vector<std::vector<int>> members_;             // [bins][<= capacity]
  std::vector<int> bin_of_;                           // [items]
  std::vector<double> top_value_;                     // [windows, 3]
  std::vector<int> top_bin_;                          // [windows, 3]
  std::vector<std::vector<int>> unique_max_windows_;  // [bins][...]: windows it tops alone.
  std::vector<int> rest_, partners_;                  // Scratch of ImproveBin.
  std::vector<double> partner_room_;                  // Scratch of ImproveBin: [bins].
  std::vector<double> own_sum_, their_sum_;           // Scratch of ImproveBin: [items].
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
      // The objective increase first: most bins lose on it before the end.
      const double limit = best < 0 ? std::numeric_limits<double>::infinity() : best_inc + tol;
      double inc = 0;
      for (int w = 0; w < w_ && inc <= limit; ++w) inc += std::max(0.0, l[w] + x[w] - cur_max[w]);
      if (inc > limit) continue;
      double dot = 0;
      for (int w = 0; w < w_; ++w) dot += l[w] * x[w];
      if (best < 0 || inc < best_inc - tol || dot < best_dot) {
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

void Packer::LocalSearch() {
  if (b_ < 2) return;
  std::vector<double> priority(b_);
  std::vector<int> candidates;
  std::vector<char> stale(b_, 0);
  double work = 0;
  ComputeTop3();
  while (work < kSwapWorkBudget) {
    double objective = 0;
    for (int w = 0; w < w_; ++w) objective += top_value_[static_cast<size_t>(w) * 3];
    if (objective <= 0) return;
    // Only a bin that is the unique maximum of some window can start an
    // improving exchange (a swap cannot lower two tied bins at once).
    std::fill(priority.begin(), priority.end(), 0.0);
    for (std::vector<int>& windows : unique_max_windows_) windows.clear();
    for (int w = 0; w < w_; ++w) {
      const int b = UniqueMaxBin(w);
      if (b < 0) continue;
      priority[b] += Top(w) - top_value_[static_cast<size_t>(w) * 3 + 1];
      unique_max_windows_[b].push_back(w);
    }
    candidates.clear();
    for (int b = 0; b < b_; ++b) {
      if (priority[b] > 0) candidates.push_back(b);
    }
    std::stable_sort(candidates.begin(), candidates.end(),
                     [&](int a, int b) { return priority[a] > priority[b]; });
    // A bin whose search failed is skipped until a swap touches it; before
    // stopping, one full pass re-checks every bin.
    bool swapped = false, skipped = false;
    for (const int p : candidates) {
      if (stale[p]) {
        skipped = true;
        continue;
      }
      const int q = ImproveBin(p, kMinRelGain * objective, work);
      if (q >= 0) {
        stale[q] = 0;
        swapped = true;
        break;
      }
      stale[p] = 1;
    }
    if (!swapped) {
      if (!skipped) return;
      std::fill(stale.begin(), stale.end(), 0);
    }
  }
}

int Packer::ImproveBin(int p, double min_gain, double& work) {
  const double* lp = Bin(p);
  // Windows where p is not the unique maximum: there a swap out of p can
  // only raise the objective.
  rest_.clear();
  for (int w = 0; w < w_; ++w) {
    if (UniqueMaxBin(w) != p) rest_.push_back(w);
  }
  const std::vector<int>& own = unique_max_windows_[p];
  // For an O(1) bound per pair: over a bin's own windows the max drops by at
  // most the bin's total gap and by at most the load the bin sheds there.
  const double gap_p = Gap(own);
  own_sum_.assign(n_, 0.0);
  for (int i = 0; i < n_; ++i) own_sum_[i] = WindowSum(Item(i), own);
  double best_delta = -min_gain;
  int best_a = -1, best_b = -1;
  // Partners with the most room in p's windows first; the first partner
  // with an improving swap wins (its best swap is applied).
  partners_.clear();
  partner_room_.assign(b_, 0.0);
  for (int q = 0; q < b_; ++q) {
    if (q == p) continue;
    partners_.push_back(q);
    partner_room_[q] = Headroom(Bin(q), own);
  }
  std::stable_sort(partners_.begin(), partners_.end(),
                   [&](int a, int b) { return partner_room_[a] > partner_room_[b]; });
  for (const int q : partners_) {
    if (best_a >= 0) break;
    const double* lq = Bin(q);
    const std::vector<int>& theirs = unique_max_windows_[q];
    const double gap_q = Gap(theirs);
    for (const int i : members_[p]) their_sum_[i] = WindowSum(Item(i), theirs);
    for (const int i : members_[q]) their_sum_[i] = WindowSum(Item(i), theirs);
    // Headroom of q below the maximum in p's windows, and of p in q's: the
    // receiving bin's new load bounds the new maximum from below.
    const double head_q = partner_room_[q];
    const double head_p = Headroom(lp, theirs);
    // Change of window w's maximum when `d` moves from q to p.
    const auto term = [&](int w, double d) {
      const int* id = &top_bin_[static_cast<size_t>(w) * 3];
      const double* v = &top_value_[static_cast<size_t>(w) * 3];
      const int k = (id[0] != p && id[0] != q) ? 0 : (id[1] != p && id[1] != q) ? 1 : 2;
      const double other = (k < 2 || (id[2] != p && id[2] != q)) ? std::max(0.0, v[k]) : 0.0;
      return std::max(other, std::max(lp[w] + d, lq[w] - d)) - v[0];
    };
    for (const int a : members_[p]) {
      const double* xa = Item(a);
      for (const int b : members_[q]) {
        const double shed_p = own_sum_[a] - own_sum_[b];
        const double shed_q = their_sum_[b] - their_sum_[a];
        const double bound = std::max({-gap_p, -shed_p, shed_p - head_q}) +
                             std::max({-gap_q, -shed_q, shed_q - head_p});
        if (bound >= best_delta) continue;
        const double* xb = Item(b);
        // Only p's and q's own windows can lower the objective; every other
        // window can only raise it, so stop once the swap cannot win.
        double delta = 0;
        for (const int w : own) delta += term(w, xb[w] - xa[w]);
        for (const int w : theirs) delta += term(w, xb[w] - xa[w]);
        int k = 0;
        for (; k < static_cast<int>(rest_.size()) && delta < best_delta; ++k) {
          const int w = rest_[k];
          if (UniqueMaxBin(w) != q) delta += term(w, xb[w] - xa[w]);
        }
        work += own.size() + theirs.size() + k + 1;
        if (delta < best_delta) {
          best_delta = delta;
          best_a = a;
          best_b = b;
        }
      }
    }
  }
  if (best_a < 0) return -1;
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
  UpdateTop3(p, q);
  return q;
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
