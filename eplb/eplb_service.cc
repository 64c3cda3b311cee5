#include "eplb/eplb_service.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "base/grpc_util.h"
#include "eplb/expert_map.h"
#include "eplb/policy/balance.h"

namespace weir::eplb {

EplbService::EplbService(int window_size, Rebalancer* rebalancer)
    : rebalancer_(rebalancer), window_(window_size) {}

void EplbService::SetWorldSize(int world_size) {
  absl::MutexLock lock(&mu_);
  window_.SetWorldSize(world_size);
  if (rebalancer_ != nullptr) {
    window_.GrowTo(world_size * (rebalancer_->options().min_window_rounds + 1));
  }
  world_size_.store(world_size);
}

absl::StatusOr<std::optional<LoadSnapshot>> EplbService::Accept(const v1::LoadReport& report) {
  const int world = world_size_.load();
  if (report.rank() < 0 || report.rank() >= world) {
    return absl::InvalidArgumentError(absl::StrCat("load report from rank ", report.rank(),
                                                   " outside the world of ", world));
  }
  LoadReportData data{.rank = report.rank(),
                      .step_id = report.step_id(),
                      .num_layers = static_cast<int>(report.num_moe_layers()),
                      .num_logical = static_cast<int>(report.num_logical()),
                      .counts = {report.counts().begin(), report.counts().end()},
                      .map_version = report.map_version(),
                      .served = {report.served().begin(), report.served().end()}};
  absl::MutexLock lock(&mu_);
  if (absl::Status s = window_.Add(std::move(data)); !s.ok()) return s;
  if (rebalancer_ == nullptr || window_.complete_rounds() == rounds_seen_) return std::nullopt;
  rounds_seen_ = window_.complete_rounds();
  if (!rebalancer_->Due(rounds_seen_, window_.CompleteStepsInWindow())) return std::nullopt;
  absl::StatusOr<policy::ExpertLoad> load = window_.LoadByStep();
  if (!load.ok()) return std::nullopt;  // Not reachable with a report just added.
  LoadSnapshot snapshot{.load = *std::move(load)};
  for (uint64_t version : window_.MapVersions()) {
    snapshot.measured_ratio[version] = window_.MeasuredRatio(version);
  }
  return snapshot;
}

grpc::Status EplbService::ReportLoad(grpc::ServerContext* context,
                                     grpc::ServerReader<v1::LoadReport>* reader,
                                     v1::ReportLoadResponse* response) {
  v1::LoadReport report;
  uint64_t accepted = 0;
  while (reader->Read(&report)) {
    absl::StatusOr<std::optional<LoadSnapshot>> due = Accept(report);
    if (!due.ok()) return ToGrpcStatus(due.status());
    ++accepted;
    if (due->has_value()) rebalancer_->Submit(**std::move(due));
  }
  response->set_reports_accepted(accepted);
  return grpc::Status::OK;
}

grpc::Status EplbService::GetState(grpc::ServerContext* context,
                                   const v1::GetEplbStateRequest* request,
                                   v1::EplbState* response) {
  RebalancerState state;
  if (rebalancer_ != nullptr) state = rebalancer_->State();
  absl::StatusOr<policy::ExpertLoad> load = absl::FailedPreconditionError("no reports");
  {
    absl::MutexLock lock(&mu_);
    response->set_window_reports(window_.size());
    response->set_window_size(window_.window_size());
    response->set_reports_total(window_.total_reports());
    response->set_measured_ratio(window_.MeasuredRatio(state.committed_version));
    if (window_.size() > 0) load = window_.LoadByStep();
  }
  response->set_committed_version(state.committed_version);
  response->set_proposals(state.proposals);
  response->set_skipped_low_gain(state.skipped_low_gain);
  for (v1::EplbState::Rebalance& entry : state.history) *response->add_history() = entry;

  // The committed placement, or the initial one until the coordinator was asked.
  absl::StatusOr<policy::Placement> placement = absl::FailedPreconditionError("no placement");
  if (state.committed_placement.has_value()) {
    placement = *state.committed_placement;
  } else if (load.ok()) {
    placement = InitialPlacement(load->num_layers(), load->num_logical_experts(),
                                 world_size_.load());
  }
  if (state.committed_map.has_value()) {
    *response->mutable_current_map() = *state.committed_map;
  } else if (placement.ok()) {
    *response->mutable_current_map() = ToExpertMapProto(*placement, 0);
  }
  if (!load.ok() || !placement.ok()) return grpc::Status::OK;
  absl::StatusOr<double> ratio = policy::PredictBalanceRatio(*placement, *load);
  absl::StatusOr<std::vector<double>> rank_loads = policy::RankLoads(*placement, *load);
  if (!ratio.ok() || !rank_loads.ok()) return grpc::Status::OK;  // Shape changed since.
  response->set_balance_ratio(*ratio);
  for (int r = 0; r < placement->num_ranks; ++r) {
    double tokens = 0;
    for (int l = 0; l < placement->num_layers; ++l) {
      tokens += (*rank_loads)[static_cast<size_t>(l) * placement->num_ranks + r];
    }
    v1::EplbState::RankLoad* rank_load = response->add_rank_loads();
    rank_load->set_rank(r);
    rank_load->set_tokens(static_cast<uint64_t>(std::llround(tokens)));
  }
  return grpc::Status::OK;
}

}  // namespace weir::eplb
