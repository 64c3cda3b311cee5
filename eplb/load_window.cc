#include "eplb/load_window.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/logging.h"

namespace weir::eplb {

LoadWindow::LoadWindow(int window_size) : window_size_(window_size) {
  WEIR_CHECK_GE(window_size, 1);
}

absl::Status LoadWindow::Add(LoadReportData report) {
  if (report.rank < 0) return absl::InvalidArgumentError("load report: negative rank");
  if (report.num_layers < 1 || report.num_logical < 1 ||
      report.counts.size() !=
          static_cast<size_t>(report.num_layers) * static_cast<size_t>(report.num_logical)) {
    return absl::InvalidArgumentError(
        absl::StrCat("load report from rank ", report.rank, ": ", report.counts.size(),
                     " counts do not match [", report.num_layers, ", ", report.num_logical, "]"));
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
  for (size_t i = 0; i < report.counts.size(); ++i) totals_[i] += report.counts[i];
  reports_.push_back(std::move(report));
  ++total_reports_;
  if (static_cast<int>(reports_.size()) > window_size_) {
    const LoadReportData& old = reports_.front();
    for (size_t i = 0; i < old.counts.size(); ++i) totals_[i] -= old.counts[i];
    reports_.pop_front();
  }
  return absl::OkStatus();
}

std::vector<uint64_t> LoadWindow::RankLoadsUnderIdentity(int world_size) const {
  if (reports_.empty() || world_size < 1 || num_logical_ % world_size != 0) return {};
  const int per_rank = num_logical_ / world_size;
  std::vector<uint64_t> loads(world_size, 0);
  for (int l = 0; l < num_layers_; ++l) {
    for (int e = 0; e < num_logical_; ++e) {
      loads[e / per_rank] += totals_[static_cast<size_t>(l) * num_logical_ + e];
    }
  }
  return loads;
}

double BalanceRatio(const std::vector<uint64_t>& loads) {
  if (loads.empty()) return 1.0;
  uint64_t sum = 0;
  for (uint64_t load : loads) sum += load;
  if (sum == 0) return 1.0;
  const double mean = static_cast<double>(sum) / static_cast<double>(loads.size());
  return static_cast<double>(*std::max_element(loads.begin(), loads.end())) / mean;
}

}  // namespace weir::eplb
