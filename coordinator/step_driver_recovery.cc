// StepDriver's recovery from a lost worker (step_driver.h, "Recovery"):
// requests to recover, the bookkeeping of recoveries, and TryRecover, which
// replaces the group through the RecoverFn and resumes every request. Split
// from step_driver.cc to keep each file under ~800 lines; same class.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/logging.h"
#include "coordinator/step_driver.h"

namespace weir::coordinator {

void StepDriver::RequestRecovery(const absl::Status& cause) {
  {
    absl::MutexLock lock(&mu_);
    if (!options_.recover || stopping_ || !failure_.ok()) return;
    if (!recovery_request_.has_value()) {
      recovery_request_ = cause;
      recovery_requested_at_ = std::min(recovery_requested_at_, absl::Now());
    }
  }
  // A loop blocked on that worker's stream wakes up (its read fails) and
  // recovers at once instead of waiting for the step deadline.
  if (wait_since_ns_.load() != 0) {
    absl::MutexLock lock(&streams_mu_);
    for (Worker& worker : workers_) worker.context->TryCancel();
  }
}

StepDriver::RecoveryStats StepDriver::Recoveries() const {
  absl::MutexLock lock(&mu_);
  return recovery_stats_;
}

absl::Status StepDriver::WithRecoveryError(const absl::Status& cause) const {
  if (recovery_error_.ok()) return cause;
  // The group could not be brought up again: nothing serves (UNAVAILABLE,
  // as for requests that arrive afterwards), whatever the step's own error.
  return absl::UnavailableError(absl::StrCat(cause.message(), "; recovery failed: ",
                                             recovery_error_.message()));
}

bool StepDriver::TryRecover(const absl::Status& cause) {
  if (!options_.recover) return false;
  const absl::Time start = absl::Now();
  absl::Time detected = start;
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return false;
    detected = std::min(detected, recovery_requested_at_);
  }
  recovery_error_ = absl::OkStatus();
  while (!recovery_times_.empty() && recovery_times_.front() < start - options_.recovery_window) {
    recovery_times_.erase(recovery_times_.begin());
  }
  if (static_cast<int>(recovery_times_.size()) >= options_.max_recoveries) {
    WEIR_LOG(ERROR) << "step failed (" << cause << ") after " << recovery_times_.size()
                    << " recoveries within " << absl::FormatDuration(options_.recovery_window)
                    << ": giving up";
    if (options_.max_recoveries > 0) {
      recovery_error_ = absl::ResourceExhaustedError(
          absl::StrCat(recovery_times_.size(), " recoveries within ",
                       absl::FormatDuration(options_.recovery_window), " (--max_recoveries)"));
    }
    return false;
  }
  recovery_times_.push_back(start);
  WEIR_LOG(WARNING) << "step failed (" << cause << "): replacing the workers; " << live_.size()
                    << " requests resume after";
  {
    absl::MutexLock lock(&streams_mu_);
    for (Worker& worker : workers_) worker.context->TryCancel();
  }
  deadline_fired_.store(false);
  wait_since_ns_.store(0);
  // The step-time history stays: the fresh workers run the same model, and
  // their first step re-prefills every live request (its deadline scales
  // with those tokens; a history reset left it at the bare floor).
  in_flight_.clear();
  in_flight_tokens_.clear();
  // Fresh workers expect step 0 first.
  steps_before_recovery_ += static_cast<int64_t>(next_step_);
  next_step_ = 0;
  for (auto& rank : ranks_) rank->ResetAfterWorkerLoss();
  for (auto& mirror : kv_mirrors_) mirror = {};
  ResolveCommit(absl::UnavailableError(
      absl::StrCat("the workers were replaced (", cause.message(), "); commit again")));
  absl::StatusOr<std::vector<std::string>> addresses;
  for (int attempt = 1;; ++attempt) {
    addresses = options_.recover(cause);
    if (addresses.ok() && addresses->size() == ranks_.size()) break;
    recovery_error_ = addresses.ok() ? absl::InternalError("wrong number of workers")
                                     : addresses.status();
    bool stopping = recovery_error_.code() == absl::StatusCode::kCancelled;
    {
      absl::MutexLock lock(&mu_);
      stopping = stopping || stopping_;
    }
    const bool last = stopping || attempt >= options_.recover_attempts ||
                      static_cast<int>(recovery_times_.size()) >= options_.max_recoveries;
    WEIR_LOG(ERROR) << "recovery failed (attempt " << attempt << " of " << options_.recover_attempts
                    << "): " << recovery_error_ << (last ? "" : "; trying again");
    if (last) return false;
    recovery_times_.push_back(absl::Now());  // the next attempt counts as a recovery
  }
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return false;
  }
  OpenStreams(*addresses);
  const absl::Duration took = absl::Now() - start;
  {
    absl::MutexLock lock(&mu_);
    recovery_request_.reset();  // whatever asked before is answered
    recovery_requested_at_ = absl::InfiniteFuture();
    ++recovery_stats_.recoveries;
    recovery_stats_.last_cause = cause.ToString();
    recovery_stats_.last_duration = took;
    recovery_stats_.last_detect_to_serving = absl::Now() - detected;
  }
  WEIR_LOG(WARNING) << "recovered in " << absl::FormatDuration(took) << "; " << live_.size()
                    << " requests resume";
  return true;
}

StepDriver::StepDriver(StepDriverOptions options, scheduler::StepTypePolicy policy)
    : options_(std::move(options)), policy_(std::move(policy)) {}

StepDriver::~StepDriver() { Stop(); }

}  // namespace weir::coordinator
