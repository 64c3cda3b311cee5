#include "eplb/eplb_service.h"

#include "base/grpc_util.h"

namespace weir::eplb {

EplbService::EplbService(int window_size) : window_(window_size) {}

grpc::Status EplbService::ReportLoad(grpc::ServerContext* context,
                                     grpc::ServerReader<v1::LoadReport>* reader,
                                     v1::ReportLoadResponse* response) {
  v1::LoadReport report;
  uint64_t accepted = 0;
  while (reader->Read(&report)) {
    if (report.rank() >= world_size_.load()) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          "load report from rank " + std::to_string(report.rank()) +
                              " outside the world of " + std::to_string(world_size_.load()));
    }
    LoadReportData data{.rank = report.rank(),
                        .step_id = report.step_id(),
                        .num_layers = static_cast<int>(report.num_moe_layers()),
                        .num_logical = static_cast<int>(report.num_logical()),
                        .counts = {report.counts().begin(), report.counts().end()}};
    absl::MutexLock lock(&mu_);
    if (absl::Status s = window_.Add(std::move(data)); !s.ok()) return ToGrpcStatus(s);
    ++accepted;
  }
  response->set_reports_accepted(accepted);
  return grpc::Status::OK;
}

grpc::Status EplbService::GetState(grpc::ServerContext* context,
                                   const v1::GetEplbStateRequest* request,
                                   v1::EplbState* response) {
  absl::MutexLock lock(&mu_);
  response->set_committed_version(0);
  response->set_window_reports(window_.size());
  response->set_window_size(window_.window_size());
  response->set_reports_total(window_.total_reports());
  std::vector<uint64_t> loads = window_.RankLoadsUnderIdentity(world_size_.load());
  response->set_balance_ratio(BalanceRatio(loads));
  for (size_t r = 0; r < loads.size(); ++r) {
    v1::EplbState::RankLoad* load = response->add_rank_loads();
    load->set_rank(static_cast<int>(r));
    load->set_tokens(loads[r]);
  }
  return grpc::Status::OK;
}

}  // namespace weir::eplb
