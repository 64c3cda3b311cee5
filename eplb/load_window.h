// eplb/load_window.h
//
// LoadWindow keeps the last `window_size` expert-load reports (each one
// rank's counts of tokens routed to every (MoE layer, logical expert) since
// its previous report) and sums them, so the service can see the recent
// load and the balance it gives under a placement.
//
// Thread safety: not thread-safe; the EPLB service guards it with a mutex.

#ifndef WEIR_EPLB_LOAD_WINDOW_H_
#define WEIR_EPLB_LOAD_WINDOW_H_

#include <cstdint>
#include <deque>
#include <vector>

#include "absl/status/status.h"

namespace weir::eplb {

struct LoadReportData {
  int rank = 0;
  uint64_t step_id = 0;
  int num_layers = 0;
  int num_logical = 0;
  // [num_layers, num_logical] token counts.
  std::vector<uint64_t> counts;
};

class LoadWindow {
 public:
  // REQUIRES: window_size >= 1.
  explicit LoadWindow(int window_size);

  // Adds a report, evicting the oldest when the window is full. The first
  // report fixes the shape; INVALID_ARGUMENT for a report whose counts do
  // not match [num_layers, num_logical], a negative rank, or a shape that
  // differs from the window's.
  absl::Status Add(LoadReportData report);

  int size() const { return static_cast<int>(reports_.size()); }
  int window_size() const { return window_size_; }
  int num_layers() const { return num_layers_; }
  int num_logical() const { return num_logical_; }
  uint64_t total_reports() const { return total_reports_; }

  // [num_layers, num_logical]: sum of the counts in the window.
  const std::vector<uint64_t>& totals() const { return totals_; }

  // Tokens each of `world_size` ranks would compute in the window if rank r
  // held experts [r * E / world, (r + 1) * E / world) of every layer (the
  // initial placement). Empty if the window is empty or E % world != 0.
  std::vector<uint64_t> RankLoadsUnderIdentity(int world_size) const;

 private:
  const int window_size_;
  int num_layers_ = 0;
  int num_logical_ = 0;
  uint64_t total_reports_ = 0;
  std::deque<LoadReportData> reports_;
  std::vector<uint64_t> totals_;
};

// Max over mean of `loads`; 1.0 for all-zero or empty loads.
double BalanceRatio(const std::vector<uint64_t>& loads);

}  // namespace weir::eplb

#endif  // WEIR_EPLB_LOAD_WINDOW_H_
