// eplb/load_window.h
//
// LoadWindow keeps the last `window_size` expert-load reports (each one
// rank's counts of tokens routed to every (MoE layer, logical expert) since
// its previous report, the map version it ran with and the rows its own
// experts computed) and derives from them what the rebalancer needs: the
// load per report step as a policy::ExpertLoad, the measured balance under a
// map version, and how many report rounds have completed.
//
// Thread safety: not thread-safe; the EPLB service guards it with a mutex.

#ifndef WEIR_EPLB_LOAD_WINDOW_H_
#define WEIR_EPLB_LOAD_WINDOW_H_

#include <cstdint>
#include <deque>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "eplb/policy/expert_load.h"

namespace weir::eplb {

struct LoadReportData {
  int rank = 0;
  uint64_t step_id = 0;
  int num_layers = 0;
  int num_logical = 0;
  // [num_layers, num_logical] token counts.
  std::vector<uint64_t> counts;
  // The expert-map version the counted steps ran with.
  uint64_t map_version = 0;
  // [num_layers] rows this rank's experts computed, or empty when the rank
  // did not measure them.
  std::vector<uint64_t> served;
};

class LoadWindow {
 public:
  // REQUIRES: window_size >= 1.
  explicit LoadWindow(int window_size);

  // Sets the number of ranks in the world. Until it is set, no round
  // completes and MeasuredRatio is 0; afterwards reports from ranks >=
  // `world_size` are refused.
  // REQUIRES: world_size >= 1.
  void SetWorldSize(int world_size) { world_size_ = world_size; }
  int world_size() const { return world_size_; }

  // Raises the capacity to at least `min_window_size` reports (never
  // lowers it), e.g. so that a large world fits a few rounds.
  void GrowTo(int min_window_size);

  // Adds a report, evicting the oldest when the window is full. The first
  // report fixes the shape. INVALID_ARGUMENT (window unchanged) for counts
  // that do not match [num_layers, num_logical], `served` neither empty nor
  // [num_layers], a negative rank or one outside the world, or a shape that
  // differs from the window's.
  absl::Status Add(LoadReportData report);

  int size() const { return static_cast<int>(reports_.size()); }
  int window_size() const { return window_size_; }
  int num_layers() const { return num_layers_; }
  int num_logical() const { return num_logical_; }
  uint64_t total_reports() const { return total_reports_; }

  // [num_layers, num_logical]: sum of the counts in the window.
  const std::vector<uint64_t>& totals() const { return totals_; }

  // Rounds completed since construction: a round completes when the last
  // rank of the world reports a step id (counted once per step id, while
  // the step's other reports are still in the window). Monotonic.
  uint64_t complete_rounds() const { return complete_rounds_; }

  // Step ids in the window that every rank of the world reported.
  int CompleteStepsInWindow() const;

  // Returns the window's load grouped by step id, ascending: window w is the
  // sum over ranks of the counts reported at the w-th distinct step id.
  // Shape [num_step_ids, num_layers, num_logical].
  // FAILED_PRECONDITION if the window is empty.
  absl::StatusOr<policy::ExpertLoad> LoadByStep() const;

  // Returns the measured balance under map version `map_version`: over the
  // step ids whose reports with that version and a `served` row come from
  // every rank of the world, per (step, layer) the max over ranks of served
  // divided by the mean over the world's ranks, averaged over the pairs with
  // non-zero load. 0 if there is no such pair (or the world is unset).
  double MeasuredRatio(uint64_t map_version) const;

  // Distinct map versions of the reports in the window, ascending.
  std::vector<uint64_t> MapVersions() const;

 private:
  int window_size_;
  int world_size_ = 0;
  int num_layers_ = 0;
  int num_logical_ = 0;
  uint64_t total_reports_ = 0;
  uint64_t complete_rounds_ = 0;
  std::deque<LoadReportData> reports_;
  std::vector<uint64_t> totals_;
};

}  // namespace weir::eplb

#endif  // WEIR_EPLB_LOAD_WINDOW_H_
