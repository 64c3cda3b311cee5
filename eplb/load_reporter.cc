#include "eplb/load_reporter.h"

#include "base/grpc_util.h"
#include "base/logging.h"

namespace weir::eplb {

LoadReporter::LoadReporter(const std::string& eplb_address)
    : address_(eplb_address), writer_([this] { Loop(); }) {}

LoadReporter::~LoadReporter() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    queue_.clear();
    if (active_context_ != nullptr) active_context_->TryCancel();
  }
  writer_.join();
}

void LoadReporter::Enqueue(int rank, uint64_t step_id, int num_layers, int num_logical,
                           std::vector<uint64_t> counts, uint64_t map_version,
                           std::vector<uint64_t> served) {
  v1::LoadReport report;
  report.set_rank(rank);
  report.set_step_id(step_id);
  report.set_num_moe_layers(num_layers);
  report.set_num_logical(num_logical);
  report.mutable_counts()->Add(counts.begin(), counts.end());
  report.set_map_version(map_version);
  report.mutable_served()->Add(served.begin(), served.end());
  absl::MutexLock lock(&mu_);
  if (queue_.size() >= kMaxQueued) {
    ++dropped_;
    return;
  }
  queue_.push_back(std::move(report));
}

uint64_t LoadReporter::sent() const {
  absl::MutexLock lock(&mu_);
  return sent_;
}

uint64_t LoadReporter::dropped() const {
  absl::MutexLock lock(&mu_);
  return dropped_;
}

void LoadReporter::Loop() {
  auto stub = v1::Eplb::NewStub(MakeChannel(address_));
  std::unique_ptr<grpc::ClientContext> context;
  std::unique_ptr<grpc::ClientWriter<v1::LoadReport>> stream;
  v1::ReportLoadResponse response;
  // Failures in a row: the first is logged, then every 1000th (EPLB down
  // means one failed report per stat interval per rank).
  uint64_t failures = 0;
  auto close = [&] {
    if (stream == nullptr) return;
    stream->WritesDone();
    grpc::Status status = stream->Finish();
    bool stopping = false;
    {
      absl::MutexLock lock(&mu_);
      stopping = stopping_;
    }
    if (status.ok()) {
      failures = 0;
    } else if (stopping && status.error_code() == grpc::StatusCode::CANCELLED) {
      // Our own cancel (the destructor): the process is stopping, nothing failed.
    } else if (failures++ % 1000 == 0) {
      WEIR_LOG(WARNING) << "EPLB ReportLoad ended: " << FromGrpcStatus(status) << " ("
                        << failures << " failed in a row; serving goes on)";
    }
    stream.reset();
    absl::MutexLock lock(&mu_);
    active_context_ = nullptr;
    context.reset();
  };
  while (true) {
    v1::LoadReport report;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_ || !queue_.empty();
      };
      mu_.Await(absl::Condition(&ready));
      if (queue_.empty()) break;  // stopping
      report = std::move(queue_.front());
      queue_.pop_front();
    }
    if (stream == nullptr) {
      context = std::make_unique<grpc::ClientContext>();
      {
        absl::MutexLock lock(&mu_);
        if (stopping_) break;
        active_context_ = context.get();
      }
      stream = stub->ReportLoad(context.get(), &response);
    }
    if (stream->Write(report)) {
      failures = 0;
      absl::MutexLock lock(&mu_);
      ++sent_;
    } else {
      close();  // EPLB is down or refused the report; reopen on the next one.
      absl::MutexLock lock(&mu_);
      ++dropped_;
    }
  }
  close();
}

}  // namespace weir::eplb
