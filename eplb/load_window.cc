#include "eplb/load_window.h"

#include <algorithm>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "base/logging.h"

namespace weir::eplb {

LoadWindow::LoadWindow(int window_size) : window_size_(window_size) {
  WEIR_CHECK_GE(window_size, 1);
}

void LoadWindow::GrowTo(int min_window_size) {
  window_size_ = std::max(window_size_, min_window_size);
}

absl::Status LoadWindow::Add(LoadReportData report) {
  if (report.rank < 0) return absl::InvalidArgumentError("load report: negative rank");
  if (world_size_ > 0 && report.rank >= world_size_) {
    return absl::InvalidArgumentError(absl::StrCat("load report from rank ", report.rank,
                                                   " outside the world of ", world_size_));
  }
  if (report.num_layers < 1 || report.num_logical < 1 ||
      report.counts.size() !=
          static_cast<size_t>(report.num_layers) * static_cast<size_t>(report.num_logical)) {
    return absl::InvalidArgumentError(
        absl::StrCat("load report from rank ", report.rank, ": ", report.counts.size(),
                     " counts do not match [", report.num_layers, ", ", report.num_logical, "]"));
  }
  if (!report.served.empty() && report.served.size() != static_cast<size_t>(report.num_layers)) {
    return absl::InvalidArgumentError(absl::StrCat("load report from rank ", report.rank, ": ",
                                                   report.served.size(),
                                                   " served rows do not match ", report.num_layers,
                                                   " layers"));
  }
  if (reports_.empty() && total_reports_ == 0) {
    num_layers_ = report.num_layers;
    num_logical_ = report.num_logical;
    totals_.assign(report.counts.size(), 0);
  } else if (report.num_layers != num_layers_ || report.num_logical != num_logical_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "load report from rank ", report.rank, ": shape [", report.num_layers, ", ",
        report.num_logical, "] differs from the window's [", num_layers_, ", ", num_logical_,
        "]"));
  }
  // Does this report complete its step's round?
  if (world_size_ > 0) {
    std::set<int> ranks;
    for (const LoadReportData& r : reports_) {
      if (r.step_id == report.step_id) ranks.insert(r.rank);
    }
    if (!ranks.contains(report.rank) && static_cast<int>(ranks.size()) + 1 == world_size_) {
      ++complete_rounds_;
    }
  }
  for (size_t i = 0; i < report.counts.size(); ++i) totals_[i] += report.counts[i];
  reports_.push_back(std::move(report));
  ++total_reports_;
  while (static_cast<int>(reports_.size()) > window_size_) {
    const LoadReportData& old = reports_.front();
    for (size_t i = 0; i < old.counts.size(); ++i) totals_[i] -= old.counts[i];
    reports_.pop_front();
  }
  return absl::OkStatus();
}

int LoadWindow::CompleteStepsInWindow() const {
  if (world_size_ < 1) return 0;
  std::map<uint64_t, std::set<int>> ranks_by_step;
  for (const LoadReportData& r : reports_) ranks_by_step[r.step_id].insert(r.rank);
  int complete = 0;
  for (const auto& [step, ranks] : ranks_by_step) {
    if (static_cast<int>(ranks.size()) == world_size_) ++complete;
  }
  return complete;
}

absl::StatusOr<policy::ExpertLoad> LoadWindow::LoadByStep() const {
  if (reports_.empty()) return absl::FailedPreconditionError("the load window is empty");
  std::map<uint64_t, int> window_of_step;
  for (const LoadReportData& r : reports_) window_of_step.emplace(r.step_id, 0);
  int next = 0;
  for (auto& [step, window] : window_of_step) window = next++;
  const size_t per_window = totals_.size();
  std::vector<double> loads(static_cast<size_t>(next) * per_window, 0.0);
  for (const LoadReportData& r : reports_) {
    double* row = loads.data() + static_cast<size_t>(window_of_step[r.step_id]) * per_window;
    for (size_t i = 0; i < per_window; ++i) row[i] += static_cast<double>(r.counts[i]);
  }
  return policy::ExpertLoad::FromDoubles(next, num_layers_, num_logical_, loads);
}

double LoadWindow::MeasuredRatio(uint64_t map_version) const {
  if (world_size_ < 1) return 0.0;
  struct StepServed {
    std::set<int> ranks;
    std::vector<uint64_t> served;  // [world, num_layers]
  };
  std::map<uint64_t, StepServed> steps;
  for (const LoadReportData& r : reports_) {
    if (r.map_version != map_version || r.served.empty()) continue;
    StepServed& step = steps[r.step_id];
    if (step.served.empty()) step.served.assign(static_cast<size_t>(world_size_) * num_layers_, 0);
    step.ranks.insert(r.rank);
    for (int l = 0; l < num_layers_; ++l) {
      step.served[static_cast<size_t>(r.rank) * num_layers_ + l] += r.served[l];
    }
  }
  double sum_ratio = 0.0;
  int pairs = 0;
  for (const auto& [step_id, step] : steps) {
    if (static_cast<int>(step.ranks.size()) != world_size_) continue;
    for (int l = 0; l < num_layers_; ++l) {
      uint64_t total = 0;
      uint64_t max = 0;
      for (int r = 0; r < world_size_; ++r) {
        const uint64_t v = step.served[static_cast<size_t>(r) * num_layers_ + l];
        total += v;
        max = std::max(max, v);
      }
      if (total == 0) continue;
      const double mean = static_cast<double>(total) / world_size_;
      sum_ratio += static_cast<double>(max) / mean;
      ++pairs;
    }
  }
  return pairs == 0 ? 0.0 : sum_ratio / pairs;
}

std::vector<uint64_t> LoadWindow::MapVersions() const {
  std::set<uint64_t> versions;
  for (const LoadReportData& r : reports_) versions.insert(r.map_version);
  return {versions.begin(), versions.end()};
}

}  // namespace weir::eplb
