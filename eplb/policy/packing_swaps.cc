// eplb/policy/packing_swaps.cc
//
// Local search of PackBalanced: best-improvement exchanges of two items
// between bins, started from bins that alone hold some window's maximum.

#include <algorithm>

#include "eplb/policy/packer.h"

namespace weir::eplb::policy::internal {

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
  Exchange(best_a, best_b);
  UpdateTop3(p, q);
  return q;
}

}  // namespace weir::eplb::policy::internal
