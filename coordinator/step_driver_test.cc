// StepDriver against in-process fake workers (every sampling row gets token
// 7): max_queue_time enforcement on an injected clock; a worker that stops
// answering (the step deadline fails the loop with DEADLINE_EXCEEDED naming
// it; Stop returns promptly even without a deadline).

#include "coordinator/step_driver.h"

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "base/grpc_util.h"
#include "coordinator/api_error.h"
#include "gtest/gtest.h"
#include "proto/worker.grpc.pb.h"

namespace weir::coordinator {
namespace {

using scheduler::FinishReason;

// The result of `plan` when every sampling row samples token 7.
v1::StepResult Sevens(const v1::StepPlan& plan) {
  v1::StepResult result;
  result.set_step_id(plan.step_id());
  for (const v1::StepRow& row : plan.rows()) {
    v1::RowResult* out = result.add_rows();
    if (row.sample()) out->add_tokens(7);
  }
  return result;
}

// A driver's options for one small rank (4-token blocks, 8 slots, EOS 0).
StepDriverOptions SmallOptions() {
  StepDriverOptions options;
  options.rank.kv.block_tokens = 4;
  options.rank.kv.compress_ratios = {1};
  options.rank.kv.num_blocks = 1024;
  options.rank.kv.num_seq_slots = 8;
  options.rank.max_model_len = 2048;
  options.rank.eos_token_ids = {0};
  return options;
}

// Answers every plan at once: one token (7) per sampling row.
class FakeWorkerService final : public v1::Worker::Service {
 public:
  grpc::Status Steps(grpc::ServerContext*,
                     grpc::ServerReaderWriter<v1::StepResult, v1::StepPlan>* stream) override {
    v1::StepPlan plan;
    while (stream->Read(&plan)) {
      if (!stream->Write(Sevens(plan))) break;
    }
    return grpc::Status::OK;
  }
};

// Everything a request's sink was given.
struct Events {
  absl::Mutex mu;
  int64_t tokens ABSL_GUARDED_BY(mu) = 0;
  std::optional<SeqEvent> last ABSL_GUARDED_BY(mu);

  void Push(const SeqEvent& event) {
    absl::MutexLock lock(&mu);
    tokens += static_cast<int64_t>(event.tokens.size());
    if (event.done()) last = event;
  }
  int64_t Tokens() {
    absl::MutexLock lock(&mu);
    return tokens;
  }
  std::optional<SeqEvent> Done() {
    absl::MutexLock lock(&mu);
    return last;
  }
  // Waits up to 10 s for `pred` over this object; false on timeout.
  bool WaitFor(const std::function<bool(Events&)>& pred) {
    // Generous: an event that takes milliseconds on an idle machine must not
    // fail the test on a loaded one; the wait ends as soon as it happens.
    const absl::Time until = absl::Now() + absl::Seconds(60);
    while (absl::Now() < until) {
      if (pred(*this)) return true;
      absl::SleepFor(absl::Milliseconds(1));
    }
    return false;
  }
  bool WaitTokens(int64_t n) {
    return WaitFor([n](Events& e) { return e.Tokens() >= n; });
  }
  bool WaitDone() {
    return WaitFor([](Events& e) { return e.Done().has_value(); });
  }
};

// Request `id` with `prompt` and `max_new` tokens whose events go to `events`.
SeqSubmission Submission(uint64_t id, std::vector<uint32_t> prompt, uint32_t max_new,
                         Events& events) {
  SeqSubmission sub;
  sub.request.id = RequestId(id);
  sub.request.prompt = std::move(prompt);
  sub.request.max_new_tokens = max_new;
  sub.sink = [&events](const SeqEvent& event) { events.Push(event); };
  return sub;
}

class StepDriverQueueTimeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<StartedServer> started =
        StartServer(ServerOptions{.address = "127.0.0.1:0"}, {&worker_});
    ASSERT_TRUE(started.ok()) << started.status();
    server_ = std::move(started->server);
    StepDriverOptions options = SmallOptions();
    options.rank.max_running = 1;  // one request runs, the others wait
    options.clock = [this] { return absl::UnixEpoch() + absl::Nanoseconds(now_ns_.load()); };
    absl::StatusOr<std::unique_ptr<StepDriver>> driver =
        StepDriver::Create({started->address}, options);
    ASSERT_TRUE(driver.ok()) << driver.status();
    driver_ = std::move(*driver);
  }
  void TearDown() override {
    driver_.reset();
    server_->Shutdown();
  }

  void Advance(absl::Duration d) { now_ns_ += absl::ToInt64Nanoseconds(d); }

  absl::Status Submit(uint64_t id, Events& events, uint32_t max_new,
                      std::optional<absl::Duration> max_queue_time) {
    SeqSubmission sub = Submission(id, {100, 101, 102, 103, 104}, max_new, events);
    sub.max_queue_time = max_queue_time;
    return driver_->Submit(std::move(sub));
  }

  FakeWorkerService worker_;
  std::unique_ptr<grpc::Server> server_;
  std::atomic<int64_t> now_ns_{0};
  std::unique_ptr<StepDriver> driver_;
};

TEST_F(StepDriverQueueTimeTest, QueuedRequestTimesOutStartedOneDoesNot) {
  Events a, b, c, d;
  // A starts at once (its deadline passes later while it runs).
  ASSERT_TRUE(Submit(1, a, 2000, absl::Seconds(1)).ok());
  ASSERT_TRUE(a.WaitTokens(1));
  // B (1 s), C (no limit) and D (10 s) wait behind A.
  ASSERT_TRUE(Submit(2, b, 4, absl::Seconds(1)).ok());
  ASSERT_TRUE(Submit(3, c, 4, std::nullopt).ok());
  ASSERT_TRUE(Submit(4, d, 4, absl::Seconds(10)).ok());
  absl::SleepFor(absl::Milliseconds(20));
  EXPECT_FALSE(b.Done().has_value());  // the clock has not moved

  Advance(absl::Seconds(2));
  ASSERT_TRUE(b.WaitDone());
  const SeqEvent timed_out = *b.Done();
  EXPECT_EQ(timed_out.error.code(), absl::StatusCode::kResourceExhausted) << timed_out.error;
  EXPECT_EQ(ErrorReason(timed_out.error), kReasonQueueTimeout);
  EXPECT_EQ(b.Tokens(), 0);

  // A (started before its deadline) keeps generating; C and D still wait.
  const int64_t a_tokens = a.Tokens();
  ASSERT_TRUE(a.WaitTokens(a_tokens + 5));
  EXPECT_FALSE(a.Done().has_value());
  EXPECT_FALSE(c.Done().has_value());
  EXPECT_FALSE(d.Done().has_value());
  EXPECT_EQ(driver_->Admission().requests, 3);  // B's entry was dropped

  // A ends: C (FCFS) runs to its length; D, still waiting, passes its
  // deadline only if it is not admitted first — admit it by finishing C.
  ASSERT_TRUE(driver_->Cancel(RequestId(1)).ok());
  ASSERT_TRUE(a.WaitDone());
  EXPECT_EQ(a.Done()->finish, FinishReason::kCancelled);
  ASSERT_TRUE(c.WaitDone());
  EXPECT_TRUE(c.Done()->error.ok()) << c.Done()->error;
  EXPECT_EQ(c.Done()->finish, FinishReason::kMaxTokens);
  ASSERT_TRUE(d.WaitDone());
  EXPECT_TRUE(d.Done()->error.ok()) << d.Done()->error;
  EXPECT_EQ(d.Tokens(), 4);
  EXPECT_TRUE(a.WaitFor([this](Events&) { return driver_->Admission().requests == 0; }));
}

TEST_F(StepDriverQueueTimeTest, WaitingRequestExpiresLaterWhileOthersRun) {
  Events a, b, c;
  ASSERT_TRUE(Submit(1, a, 2000, std::nullopt).ok());
  ASSERT_TRUE(a.WaitTokens(1));
  ASSERT_TRUE(Submit(2, b, 4, absl::Seconds(5)).ok());
  ASSERT_TRUE(Submit(3, c, 4, absl::Seconds(60)).ok());
  Advance(absl::Seconds(4));
  absl::SleepFor(absl::Milliseconds(20));
  EXPECT_FALSE(b.Done().has_value());  // 4 s < 5 s
  Advance(absl::Seconds(2));
  ASSERT_TRUE(b.WaitDone());
  EXPECT_EQ(b.Done()->error.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_FALSE(c.Done().has_value());
  EXPECT_FALSE(a.Done().has_value());
  ASSERT_TRUE(driver_->Cancel(RequestId(1)).ok());
  ASSERT_TRUE(c.WaitDone());
  EXPECT_EQ(c.Done()->finish, FinishReason::kMaxTokens);
  EXPECT_EQ(c.Tokens(), 4);
}

TEST_F(StepDriverQueueTimeTest, ZeroQueueTimeOnAnIdleDriverStillRuns) {
  // A zero max_queue_time gets one admission attempt: with room, it runs.
  Events a;
  ASSERT_TRUE(Submit(1, a, 4, absl::ZeroDuration()).ok());
  ASSERT_TRUE(a.WaitDone());
  EXPECT_TRUE(a.Done()->error.ok()) << a.Done()->error;
  EXPECT_EQ(a.Tokens(), 4);
}

// Answers `answer` steps, then keeps its stream open without answering (a
// SIGSTOPped or wedged worker) until the client cancels or Release.
class HangingWorkerService final : public v1::Worker::Service {
 public:
  explicit HangingWorkerService(int answer) : answer_(answer) {}
  void Release() { released_ = true; }
  grpc::Status Steps(grpc::ServerContext* context,
                     grpc::ServerReaderWriter<v1::StepResult, v1::StepPlan>* stream) override {
    v1::StepPlan plan;
    int answered = 0;
    while (answered < answer_ && stream->Read(&plan)) {
      if (!stream->Write(Sevens(plan))) break;
      ++answered;
    }
    while (!context->IsCancelled() && !released_) absl::SleepFor(absl::Milliseconds(5));
    return grpc::Status::OK;
  }

 private:
  const int answer_;
  std::atomic<bool> released_{false};
};

class StepDriverHungWorkerTest : public ::testing::Test {
 protected:
  void Start(absl::Duration step_timeout) {
    absl::StatusOr<StartedServer> started =
        StartServer(ServerOptions{.address = "127.0.0.1:0"}, {&worker_});
    ASSERT_TRUE(started.ok()) << started.status();
    server_ = std::move(started->server);
    StepDriverOptions options = SmallOptions();
    options.step_timeout = step_timeout;
    absl::StatusOr<std::unique_ptr<StepDriver>> driver =
        StepDriver::Create({started->address}, options);
    ASSERT_TRUE(driver.ok()) << driver.status();
    driver_ = std::move(*driver);
  }
  void TearDown() override {
    worker_.Release();
    driver_.reset();
    if (server_) server_->Shutdown();
  }
  absl::Status Submit(uint64_t id, Events& events) {
    return driver_->Submit(Submission(id, {100, 101, 102}, 1000, events));
  }

  HangingWorkerService worker_{5};
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<StepDriver> driver_;
};

// Drain: in-flight requests finish, new ones are refused.
TEST_F(StepDriverQueueTimeTest, DrainLetsInFlightRequestsFinish) {
  Events a;
  ASSERT_TRUE(Submit(1, a, 50, std::nullopt).ok());
  ASSERT_TRUE(a.WaitTokens(1));
  int64_t left = -1;
  std::thread drain([&] { left = driver_->Drain(absl::Seconds(10)); });
  // Until the drain is in force a submission is still taken (it then runs
  // to its end like A); fresh ids each try.
  Events b;
  absl::Status refused;
  uint64_t next_id = 100;
  ASSERT_TRUE(b.WaitFor([&](Events&) {
    refused = Submit(next_id++, b, 4, std::nullopt);
    return !refused.ok();
  }));
  EXPECT_EQ(refused.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(refused.message().find("draining"), std::string::npos) << refused;
  drain.join();
  EXPECT_EQ(left, 0);
  ASSERT_TRUE(a.Done().has_value());
  EXPECT_TRUE(a.Done()->error.ok()) << a.Done()->error;
  EXPECT_EQ(a.Done()->finish, FinishReason::kMaxTokens);
  EXPECT_EQ(a.Tokens(), 50);
}

TEST_F(StepDriverHungWorkerTest, DrainTimesOutThenStopFailsWhatIsLeft) {
  Start(absl::ZeroDuration());
  Events a;
  ASSERT_TRUE(Submit(1, a).ok());
  ASSERT_TRUE(a.WaitTokens(1));
  EXPECT_EQ(driver_->Drain(absl::Milliseconds(200)), 1);
  driver_->Stop();
  ASSERT_TRUE(a.Done().has_value());
  EXPECT_EQ(a.Done()->error.message(), "server is stopping");
}

TEST_F(StepDriverHungWorkerTest, DeadlineFailsTheLoopNamingTheWorker) {
  Start(absl::Milliseconds(300));
  Events a;
  const absl::Time start = absl::Now();
  ASSERT_TRUE(Submit(1, a).ok());
  ASSERT_TRUE(a.WaitDone());
  const absl::Duration took = absl::Now() - start;
  const SeqEvent done = *a.Done();
  EXPECT_EQ(done.error.code(), absl::StatusCode::kDeadlineExceeded) << done.error;
  EXPECT_NE(done.error.message().find("worker rank 0"), std::string::npos) << done.error;
  EXPECT_GE(a.Tokens(), 1);  // it ran until the worker stopped answering
  EXPECT_GE(took, absl::Milliseconds(300));  // the step deadline never fires early
  Events b;
  EXPECT_EQ(Submit(2, b).code(), absl::StatusCode::kUnavailable);
}

// Answers every plan after `per_token` for each input token it carries (a row
// without inputs counts one): a prefill step takes long, decode steps little.
class TokenPacedWorkerService final : public v1::Worker::Service {
 public:
  explicit TokenPacedWorkerService(absl::Duration per_token) : per_token_(per_token) {}
  grpc::Status Steps(grpc::ServerContext*,
                     grpc::ServerReaderWriter<v1::StepResult, v1::StepPlan>* stream) override {
    v1::StepPlan plan;
    while (stream->Read(&plan)) {
      int64_t tokens = 0;
      for (const v1::StepRow& row : plan.rows()) {
        tokens += std::max(1, row.input_tokens_size());
      }
      absl::SleepFor(per_token_ * tokens);
      if (!stream->Write(Sevens(plan))) break;
    }
    return grpc::Status::OK;
  }

 private:
  const absl::Duration per_token_;
};

// The deadline scales with the step's tokens: after fast one-token steps, a
// 200-token prefill step that takes twice the floor is no hang (before, a
// first step re-prefilling every request after a recovery could fire it).
// A request's samples submitted as one group reach the loop together: the
// others fork the first one's prefill every time (submitted one by one, the
// loop could plan the first sample's whole prefill before the others came).
TEST(StepDriverSubmitGroupTest, SamplesSubmittedTogetherForkTheFirstPrefill) {
  FakeWorkerService worker;
  absl::StatusOr<StartedServer> started =
      StartServer(ServerOptions{.address = "127.0.0.1:0"}, {&worker});
  ASSERT_TRUE(started.ok()) << started.status();
  absl::StatusOr<std::unique_ptr<StepDriver>> driver =
      StepDriver::Create({started->address}, SmallOptions());
  ASSERT_TRUE(driver.ok()) << driver.status();
  for (int round = 0; round < 20; ++round) {
    const int64_t forks_before = (*driver)->forks();
    Events events[3];
    std::vector<SeqSubmission> group;
    for (uint64_t i = 0; i < 3; ++i) {
      SeqSubmission sub = Submission(100 * round + i + 1, {100, 101, 102, 103, 104}, 4, events[i]);
      if (i > 0) sub.request.fork_of = RequestId(100 * round + 1);
      group.push_back(std::move(sub));
    }
    ASSERT_TRUE((*driver)->SubmitGroup(std::move(group)).ok());
    for (Events& e : events) {
      ASSERT_TRUE(e.WaitDone());
      EXPECT_TRUE(e.Done()->error.ok()) << e.Done()->error;
      EXPECT_EQ(e.Tokens(), 4);
    }
    EXPECT_EQ((*driver)->forks() - forks_before, 2) << "round " << round;
  }
  // All or none: a group that does not fit the request limit queues nothing.
  StepDriverOptions small = SmallOptions();
  small.max_requests = 2;
  absl::StatusOr<std::unique_ptr<StepDriver>> tight =
      StepDriver::Create({started->address}, small);
  ASSERT_TRUE(tight.ok()) << tight.status();
  Events late[3];
  std::vector<SeqSubmission> group;
  for (uint64_t i = 0; i < 3; ++i) group.push_back(Submission(9000 + i, {100, 101}, 2, late[i]));
  const absl::Status refused = (*tight)->SubmitGroup(std::move(group));
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted) << refused;
  Events alone;
  EXPECT_TRUE((*tight)->Submit(Submission(9000, {100, 101}, 2, alone)).ok());  // id not taken
  ASSERT_TRUE(alone.WaitDone());
  tight->reset();
  driver->reset();
  started->server->Shutdown();
}

TEST(StepDriverDeadlineTest, ALongPrefillStepIsNotAHang) {
  TokenPacedWorkerService worker(absl::Milliseconds(3));
  absl::StatusOr<StartedServer> started =
      StartServer(ServerOptions{.address = "127.0.0.1:0"}, {&worker});
  ASSERT_TRUE(started.ok()) << started.status();
  StepDriverOptions options = SmallOptions();
  options.step_timeout = absl::Milliseconds(300);
  absl::StatusOr<std::unique_ptr<StepDriver>> driver =
      StepDriver::Create({started->address}, options);
  ASSERT_TRUE(driver.ok()) << driver.status();
  Events a, b;
  ASSERT_TRUE((*driver)->Submit(Submission(1, {100, 101, 102}, 40, a)).ok());
  ASSERT_TRUE(a.WaitTokens(10));  // step times of one or two tokens recorded
  std::vector<uint32_t> long_prompt(200);
  for (size_t i = 0; i < long_prompt.size(); ++i) long_prompt[i] = 100 + i % 50;
  ASSERT_TRUE((*driver)->Submit(Submission(2, long_prompt, 3, b)).ok());
  ASSERT_TRUE(b.WaitDone());
  ASSERT_TRUE(a.WaitDone());
  EXPECT_TRUE(b.Done()->error.ok()) << b.Done()->error;
  EXPECT_TRUE(a.Done()->error.ok()) << a.Done()->error;
  EXPECT_EQ(b.Tokens(), 3);
  EXPECT_TRUE((*driver)->failure().ok()) << (*driver)->failure();
  driver->reset();
  started->server->Shutdown();
}

TEST_F(StepDriverHungWorkerTest, StopReturnsWithoutADeadline) {
  Start(absl::ZeroDuration());
  Events a;
  ASSERT_TRUE(Submit(1, a).ok());
  ASSERT_TRUE(a.WaitTokens(1));
  absl::SleepFor(absl::Milliseconds(100));  // the loop now waits on the silent worker
  EXPECT_FALSE(a.Done().has_value());
  const absl::Time start = absl::Now();
  driver_->Stop();
  EXPECT_LT(absl::Now() - start, absl::Seconds(30));  // only a hang fails this
  ASSERT_TRUE(a.Done().has_value());
  EXPECT_EQ(a.Done()->error.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(a.Done()->error.message(), "server is stopping");
}

// Recovery: the group's worker ends its stream after a few steps (a crash);
// the driver calls `recover`, which hands it a fresh worker; every request
// goes on from the tokens it already has and ends with exactly its length.
class StepDriverRecoveryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (auto* service : {static_cast<grpc::Service*>(&dying_),
                          static_cast<grpc::Service*>(&fresh_)}) {
      absl::StatusOr<StartedServer> started =
          StartServer(ServerOptions{.address = "127.0.0.1:0"}, {service});
      ASSERT_TRUE(started.ok()) << started.status();
      addresses_.push_back(started->address);
      servers_.push_back(std::move(started->server));
    }
  }
  // recover_ok false: every recovery attempt fails; else the first
  // `failed_attempts` fail (a replacement that did not come up) and the next
  // one gives the fresh worker.
  void Start(bool recover_ok, int failed_attempts = 0) {
    StepDriverOptions options = SmallOptions();
    options.group_epoch = [this] { return group_epoch_.load(); };
    options.recover_attempts = 3;
    options.recover = [this, recover_ok, failed_attempts](
                          const absl::Status& cause) -> absl::StatusOr<std::vector<std::string>> {
      causes_.push_back(cause);
      if (!recover_ok) return absl::UnavailableError("no spare worker");
      if (static_cast<int>(causes_.size()) <= failed_attempts) {
        return absl::UnavailableError("the replacement worker exited while starting");
      }
      ++group_epoch_;  // the replacement group's bring-up
      return std::vector<std::string>{addresses_[1]};
    };
    absl::StatusOr<std::unique_ptr<StepDriver>> driver =
        StepDriver::Create({addresses_[0]}, options);
    ASSERT_TRUE(driver.ok()) << driver.status();
    driver_ = std::move(*driver);
  }
  void TearDown() override {
    driver_.reset();
    for (auto& server : servers_) server->Shutdown();
  }
  absl::Status Submit(uint64_t id, Events& events, uint32_t max_new) {
    return driver_->Submit(Submission(id, {100, 101, 102}, max_new, events));
  }

  // Answers 6 steps, then ends its stream (the process died).
  class DyingWorkerService final : public v1::Worker::Service {
   public:
    grpc::Status Steps(grpc::ServerContext*,
                       grpc::ServerReaderWriter<v1::StepResult, v1::StepPlan>* stream) override {
      v1::StepPlan plan;
      for (int answered = 0; answered < 6 && stream->Read(&plan); ++answered) {
        group_epoch = plan.group_epoch();
        if (!stream->Write(Sevens(plan))) break;
      }
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "worker died");
    }
    std::atomic<uint64_t> group_epoch{0};  // of the last plan it got
  };
  std::atomic<uint64_t> group_epoch_{1};
  DyingWorkerService dying_;
  FakeWorkerService fresh_;
  std::vector<std::string> addresses_;
  std::vector<std::unique_ptr<grpc::Server>> servers_;
  std::vector<absl::Status> causes_;  // written on the loop thread, read after Done
  std::unique_ptr<StepDriver> driver_;
};

TEST_F(StepDriverRecoveryTest, RequestsFinishOnTheReplacementWorker) {
  Start(/*recover_ok=*/true);
  Events a, b;
  ASSERT_TRUE(Submit(1, a, 40).ok());
  ASSERT_TRUE(Submit(2, b, 25).ok());
  ASSERT_TRUE(a.WaitDone());
  ASSERT_TRUE(b.WaitDone());
  EXPECT_TRUE(a.Done()->error.ok()) << a.Done()->error;
  EXPECT_EQ(a.Done()->finish, FinishReason::kMaxTokens);
  EXPECT_EQ(a.Tokens(), 40);  // none lost, none twice
  EXPECT_TRUE(b.Done()->error.ok()) << b.Done()->error;
  EXPECT_EQ(b.Tokens(), 25);
  const StepDriver::RecoveryStats stats = driver_->Recoveries();
  EXPECT_EQ(stats.recoveries, 1);
  EXPECT_NE(stats.last_cause.find("worker rank 0"), std::string::npos) << stats.last_cause;
  EXPECT_GE(stats.last_detect_to_serving, stats.last_duration);
  ASSERT_EQ(causes_.size(), 1u);
  EXPECT_EQ(dying_.group_epoch.load(), 1u);  // the first group's plans carry its epoch
  // And the loop serves new requests on the new worker.
  Events c;
  ASSERT_TRUE(Submit(3, c, 5).ok());
  ASSERT_TRUE(c.WaitDone());
  EXPECT_EQ(c.Tokens(), 5);
}

// A recovery whose first bring-up fails is tried again (recover_attempts):
// the requests finish on the worker the second attempt gives, none lost.
TEST_F(StepDriverRecoveryTest, AFailedBringUpIsTriedAgain) {
  Start(/*recover_ok=*/true, /*failed_attempts=*/1);
  Events a;
  ASSERT_TRUE(Submit(1, a, 40).ok());
  ASSERT_TRUE(a.WaitDone());
  EXPECT_TRUE(a.Done()->error.ok()) << a.Done()->error;
  EXPECT_EQ(a.Tokens(), 40);
  EXPECT_EQ(driver_->Recoveries().recoveries, 1);
  EXPECT_EQ(causes_.size(), 2u);  // two calls of recover for the one failure
  EXPECT_TRUE(driver_->failure().ok()) << driver_->failure();
}

TEST_F(StepDriverRecoveryTest, FailedRecoveryFailsTheRequests) {
  Start(/*recover_ok=*/false);
  Events a;
  // The request's sink reads the loop's failure the moment its error
  // arrives: the cause is recorded before any request hears of it.
  absl::Mutex mu;
  absl::Status failure_seen_by_sink = absl::OkStatus();
  SeqSubmission sub = Submission(1, {100, 101, 102}, 40, a);
  sub.sink = [&, inner = std::move(sub.sink)](const SeqEvent& event) {
    if (event.done() && !event.error.ok()) {
      absl::MutexLock lock(&mu);
      failure_seen_by_sink = driver_->failure();
    }
    inner(event);
  };
  ASSERT_TRUE(driver_->Submit(std::move(sub)).ok());
  ASSERT_TRUE(a.WaitDone());
  EXPECT_FALSE(a.Done()->error.ok());
  {
    absl::MutexLock lock(&mu);
    EXPECT_FALSE(failure_seen_by_sink.ok()) << "the request failed before the loop said why";
    EXPECT_EQ(failure_seen_by_sink, a.Done()->error);
  }
  EXPECT_LT(a.Tokens(), 40);
  EXPECT_EQ(driver_->Recoveries().recoveries, 0);
  // The loop's failure names the step's error and why recovery failed.
  const absl::Status failure = driver_->failure();
  EXPECT_EQ(failure.code(), absl::StatusCode::kUnavailable) << failure;
  EXPECT_NE(failure.message().find("recovery failed: no spare worker"), std::string::npos)
      << failure;
  EXPECT_EQ(causes_.size(), 3u);  // recover_attempts: tried three times
}

}  // namespace
}  // namespace weir::coordinator
