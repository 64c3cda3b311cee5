// coordinator/scheduler/worker_loss_test.cc
//
// RankScheduler::ResetAfterWorkerLoss: a rank's worker is replaced in the
// middle of a run (zero-overhead stepping, one step in flight whose result
// never arrives, some sequences prefilling, some decoding, some waiting);
// a fresh FakeWorker (which refuses any plan a real worker could not run)
// takes over, and every request's token stream equals the reference output
// — no token lost, none twice — and the KV books end empty.

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "coordinator/scheduler/fake_worker.h"
#include "coordinator/scheduler/rank_scheduler.h"
#include "coordinator/scheduler/test_util.h"
#include "gtest/gtest.h"

namespace weir::coordinator::scheduler {
namespace {

class LossRun {
 public:
  explicit LossRun(const RankSchedulerConfig& config)
      : config_(config), sched_(*RankScheduler::Create(config)),
        worker_(std::make_unique<FakeWorker>(config.kv, FakeModel{})) {}

  RankScheduler& sched() { return *sched_; }
  const absl::flat_hash_map<RequestId, std::vector<uint32_t>>& streams() const {
    return streams_;
  }
  const absl::flat_hash_map<RequestId, FinishReason>& finishes() const { return finishes_; }

  // Zero-overhead: plans step t+1 before applying result t.
  void Step() {
    // Prefill and decode steps alternate (either may be empty).
    const StepType type = next_step_ % 2 == 0 ? StepType::kPrefill : StepType::kDecode;
    absl::StatusOr<RankStepPlan> plan = sched_->BuildPlan(next_step_++, type);
    ASSERT_TRUE(plan.ok()) << plan.status();
    absl::StatusOr<RankStepResult> result = worker_->Execute(*plan);
    ASSERT_TRUE(result.ok()) << result.status();
    pending_.push_back(*std::move(result));
    if (pending_.size() >= 2) Apply();
  }
  void Apply() {
    absl::StatusOr<std::vector<SeqUpdate>> updates = sched_->OnResult(pending_.front());
    pending_.erase(pending_.begin());
    ASSERT_TRUE(updates.ok()) << updates.status();
    for (const SeqUpdate& u : *updates) {
      std::vector<uint32_t>& s = streams_[u.request];
      s.insert(s.end(), u.new_tokens.begin(), u.new_tokens.end());
      if (u.finish != FinishReason::kNone) finishes_[u.request] = u.finish;
    }
  }
  // The worker dies: its unanswered step is lost; a fresh one takes over.
  void LoseWorker() {
    pending_.clear();
    sched_->ResetAfterWorkerLoss();
    worker_ = std::make_unique<FakeWorker>(config_.kv, FakeModel{});
  }
  void RunToIdle() {
    for (int i = 0; i < 10000 && (sched_->num_live() > 0 || !pending_.empty()); ++i) {
      if (sched_->num_live() > 0) {
        Step();
      } else {
        Apply();
      }
    }
    while (!pending_.empty()) Apply();
  }

 private:
  RankSchedulerConfig config_;
  std::unique_ptr<RankScheduler> sched_;
  std::unique_ptr<FakeWorker> worker_;
  std::vector<RankStepResult> pending_;
  uint64_t next_step_ = 0;
  absl::flat_hash_map<RequestId, std::vector<uint32_t>> streams_;
  absl::flat_hash_map<RequestId, FinishReason> finishes_;
};

TEST(WorkerLossTest, StreamsContinueExactlyOnAFreshWorker) {
  // 24 blocks of 4 and a 12-token prefill budget: chunked prefills, a queue,
  // and preemptions before and after the loss.
  RankSchedulerConfig config = SmallConfig(24, /*budget=*/12, /*batch=*/4);
  config.max_running = 4;
  LossRun run(config);
  std::vector<SeqRequest> requests;
  for (uint64_t id = 1; id <= 9; ++id) {
    requests.push_back(MakeRequest(id, static_cast<int>(3 + 2 * id), 10 + id));
    ASSERT_TRUE(run.sched().Add(requests.back()).ok());
  }
  for (int i = 0; i < 9; ++i) run.Step();
  const int64_t delivered_before = [&] {
    int64_t n = 0;
    for (const auto& [id, s] : run.streams()) n += static_cast<int64_t>(s.size());
    return n;
  }();
  EXPECT_GT(delivered_before, 0);  // some output was already delivered
  EXPECT_GT(run.sched().num_live(), 0);
  run.LoseWorker();
  EXPECT_EQ(run.sched().blocks().num_free_blocks(), config.kv.num_blocks);
  EXPECT_TRUE(run.sched().slots_to_release().empty());
  run.RunToIdle();
  for (const SeqRequest& r : requests) {
    FinishReason want_reason = FinishReason::kNone;
    const std::vector<uint32_t> want =
        ReferenceOutput(FakeModel{}, r, config.eos_token_ids, config.max_model_len, &want_reason);
    ASSERT_TRUE(run.streams().contains(r.id)) << r.id.value();
    EXPECT_EQ(run.streams().at(r.id), want) << "request " << r.id.value();
    ASSERT_TRUE(run.finishes().contains(r.id)) << r.id.value();
    EXPECT_EQ(run.finishes().at(r.id), want_reason) << r.id.value();
  }
  EXPECT_EQ(run.sched().num_live(), 0);
  EXPECT_EQ(run.sched().blocks().num_free_blocks(), config.kv.num_blocks);
}

}  // namespace
}  // namespace weir::coordinator::scheduler
