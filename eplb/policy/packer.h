// eplb/policy/packer.h
//
// Packer: the state of one PackBalanced call (bin loads, members, per-window
// top three bins). Internal to the packing library; see packing.h for the
// contract. packing.cc holds the start, packing_variance.cc the variance
// descent, packing_swaps.cc the local search on the objective.
//
// Thread safety: one Packer per call; not shared.

#ifndef WEIR_EPLB_POLICY_PACKER_H_
#define WEIR_EPLB_POLICY_PACKER_H_

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/types/span.h"

namespace weir::eplb::policy::internal {

// Upper bound on swap evaluations (times num_windows) per call; keeps the
// worst case bounded while typical inputs converge well before it.
constexpr double kSwapWorkBudget = 4e7;
// A swap must lower the objective by this fraction to be applied: smaller
// gains are within the noise of the loads and cost most of the search time.
constexpr double kMinRelGain = 1e-5;
// Sweeps of the variance descent in PackBalanced: later sweeps move the sum
// of squares little and the objective not at all on typical inputs.
constexpr int kVarianceSweeps = 4;
// The variance descent keeps an [items, items] Gram matrix; above this many
// items (32 MiB of it) PackBalanced skips the descent.
constexpr int kMaxVarianceItems = 2048;

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

  // Places every item, largest total first, on the open bin with the least
  // total load (ties: lowest index).
  void LargestFirst();
  // Exchanges items of two bins while an exchange lowers the sum over windows
  // and bins of the squared bin load (the spread of the bin loads around each
  // window's mean), for at most `max_sweeps` sweeps over the items. Returns
  // the number of exchanges applied. REQUIRES: LargestFirst() ran.
  int BalanceVariance(int max_sweeps);
  // Returns the packing objective (sum over windows of the largest bin load).
  double Objective() const;
  // Returns true if some item's total load is at least the mean bin's total:
  // that item's bin then sets the objective and spreading the rest is moot.
  bool HasDominantItem() const;
  // The current bin of every item, and setting it back (bins rebuilt).
  const std::vector<int>& bins() const { return bin_of_; }
  void Assign(const std::vector<int>& bin_of);
  // Applies improving exchanges until no bin has one or the work budget is
  // spent. REQUIRES: LargestFirst() ran.
  void LocalSearch();
  std::vector<int> TakeBins() { return std::move(bin_of_); }

 private:
  const double* Item(int i) const { return loads_.data() + static_cast<size_t>(i) * w_; }
  double* Bin(int b) { return bin_load_.data() + static_cast<size_t>(b) * w_; }
  const double* Bin(int b) const { return bin_load_.data() + static_cast<size_t>(b) * w_; }
  void Place(int item, int bin);
  // Moves item `a` (in bin p) to bin q and item `b` (in bin q) to bin p.
  void Exchange(int a, int b);
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

}  // namespace weir::eplb::policy::internal

#endif  // WEIR_EPLB_POLICY_PACKER_H_
