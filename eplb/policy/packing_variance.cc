// eplb/policy/packing_variance.cc
//
// Variance descent of PackBalanced: exchanges of two items between bins that
// lower sum_w sum_b load[b][w]^2. With the Gram matrix of the item vectors and
// every item's dot product with every bin, an exchange costs O(1) to evaluate
// and O(items) to apply, so a sweep over all pairs is O(items^2).

#include <algorithm>
#include <vector>

#include "eplb/policy/packer.h"

namespace weir::eplb::policy::internal {

int Packer::BalanceVariance(int max_sweeps) {
  if (b_ < 2 || max_sweeps < 1) return 0;
  const size_t n = n_;
  // gram[i, j] = x_i . x_j over windows [items, items]; four columns at a
  // time so the sums run side by side.
  std::vector<double> gram(n * n);
  for (int i = 0; i < n_; ++i) {
    const double* xi = Item(i);
    int j = i;
    for (; j + 4 <= n_; j += 4) {
      const double* x0 = Item(j);
      const double* x1 = Item(j + 1);
      const double* x2 = Item(j + 2);
      const double* x3 = Item(j + 3);
      double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
      for (int w = 0; w < w_; ++w) {
        s0 += xi[w] * x0[w];
        s1 += xi[w] * x1[w];
        s2 += xi[w] * x2[w];
        s3 += xi[w] * x3[w];
      }
      const double sums[4] = {s0, s1, s2, s3};
      for (int k = 0; k < 4; ++k) gram[i * n + j + k] = gram[(j + k) * n + i] = sums[k];
    }
    for (; j < n_; ++j) {
      const double* xj = Item(j);
      double sum = 0;
      for (int w = 0; w < w_; ++w) sum += xi[w] * xj[w];
      gram[i * n + j] = gram[j * n + i] = sum;
    }
  }
  // dot[i, b] = x_i . (load of bin b) [items, bins].
  std::vector<double> dot(n * b_, 0.0);
  double scale = 0;
  for (int i = 0; i < n_; ++i) {
    for (int j = 0; j < n_; ++j) dot[i * b_ + bin_of_[j]] += gram[i * n + j];
    scale += dot[i * b_ + bin_of_[i]];
  }
  // Exchanging a (bin p) and b (bin q) changes the sum of squares by twice
  // d.(L_p - L_q) + |d|^2 with d = x_b - x_a. Gains below the tolerance are
  // rounding.
  const double min_gain = 1e-9 * scale;
  int exchanges = 0;
  for (int sweep = 0; sweep < max_sweeps; ++sweep) {
    int applied = 0;
    for (int a = 0; a < n_; ++a) {
      const int p = bin_of_[a];
      const double* ga = &gram[a * n];
      const double* da = &dot[a * b_];
      double best = -min_gain;
      int best_b = -1;
      for (int b = 0; b < n_; ++b) {
        const int q = bin_of_[b];
        if (q == p) continue;
        const double* db = &dot[b * b_];
        const double delta =
            db[p] - da[p] - db[q] + da[q] + ga[a] + gram[b * n + b] - 2 * ga[b];
        if (delta < best) {  // Strict: ties keep the lowest index.
          best = delta;
          best_b = b;
        }
      }
      if (best_b < 0) continue;
      const int q = bin_of_[best_b];
      const double* gb = &gram[best_b * n];
      for (int i = 0; i < n_; ++i) {
        dot[i * b_ + p] += gb[i] - ga[i];
        dot[i * b_ + q] -= gb[i] - ga[i];
      }
      Exchange(a, best_b);
      ++applied;
    }
    exchanges += applied;
    if (applied == 0) break;
  }
  return exchanges;
}

}  // namespace weir::eplb::policy::internal
