// coordinator/scheduler/group_driver.cc

#include "coordinator/scheduler/group_driver.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace weir::coordinator::scheduler {

GroupDriver::GroupDriver(std::vector<RankScheduler*> ranks, std::vector<FakeWorker*> workers,
                         StepTypePolicy policy, bool zero_overhead)
    : ranks_(std::move(ranks)),
      workers_(std::move(workers)),
      policy_(std::move(policy)),
      zero_overhead_(zero_overhead) {}

absl::Status GroupDriver::Apply(std::vector<RankStepResult>& results) {
  for (size_t r = 0; r < ranks_.size(); ++r) {
    ASSIGN_OR_RETURN(std::vector<SeqUpdate> updates, ranks_[r]->OnResult(results[r]));
    for (SeqUpdate& u : updates) {
      Stream& s = streams_[u.request];
      if (s.finish != FinishReason::kNone) {
        return absl::InternalError(absl::StrCat("update for finished request ", u.request.value()));
      }
      s.tokens.insert(s.tokens.end(), u.new_tokens.begin(), u.new_tokens.end());
      s.finish = u.finish;
      num_finished_ += u.finish != FinishReason::kNone;
      ++last_updates_;
    }
  }
  return absl::OkStatus();
}

absl::Status GroupDriver::Step() {
  last_updates_ = 0;
  std::vector<RankLoad> loads;
  for (RankScheduler* r : ranks_) loads.push_back(r->Load());
  const StepType type = policy_.Decide(loads);
  prefill_steps_ += type == StepType::kPrefill;
  const uint64_t step = next_step_++;
  std::vector<RankStepPlan> plans;
  for (RankScheduler* r : ranks_) {
    ASSIGN_OR_RETURN(RankStepPlan plan, r->BuildPlan(step, type));
    plans.push_back(std::move(plan));
  }
  // Zero-overhead: the result of the previous step arrives only now.
  if (undelivered_.has_value()) {
    RETURN_IF_ERROR(Apply(*undelivered_));
    undelivered_.reset();
  }
  std::vector<RankStepResult> results;
  for (size_t r = 0; r < ranks_.size(); ++r) {
    ASSIGN_OR_RETURN(RankStepResult result, workers_[r]->Execute(plans[r]));
    results.push_back(std::move(result));
  }
  if (zero_overhead_) {
    undelivered_ = std::move(results);
    return absl::OkStatus();
  }
  return Apply(results);
}

absl::Status GroupDriver::Flush() {
  if (!undelivered_.has_value()) return absl::OkStatus();
  absl::Status s = Apply(*undelivered_);
  undelivered_.reset();
  return s;
}

absl::Status GroupDriver::RunToIdle(int64_t max_steps) {
  for (int64_t i = 0; i < max_steps; ++i) {
    bool live = false;
    for (RankScheduler* r : ranks_) live |= r->num_live() > 0;
    if (!live) return Flush();
    RETURN_IF_ERROR(Step());
  }
  return absl::DeadlineExceededError(absl::StrCat("not idle after ", max_steps, " steps"));
}

}  // namespace weir::coordinator::scheduler
