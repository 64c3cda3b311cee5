// BatchRun over a real StepDriver whose one worker is an in-process fake
// (gRPC on loopback) answering every sampling row with token 7: every item's
// result holds its max_new_tokens sevens; input order holds results back for
// their turn; a bad item fails alone and the Summary counts it; fail_fast
// cancels what has not run; an item past item_timeout ends with DEADLINE and
// counts as failed; a Summary is the last message.

#include "coordinator/batch_run.h"

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "base/grpc_util.h"
#include "gtest/gtest.h"
#include "proto/worker.grpc.pb.h"

namespace weir::coordinator {
namespace {

// Answers every plan at once: one token (7) per sampling row.
class SevensWorker final : public v1::Worker::Service {
 public:
  grpc::Status Steps(grpc::ServerContext*,
                     grpc::ServerReaderWriter<v1::StepResult, v1::StepPlan>* stream) override {
    v1::StepPlan plan;
    while (stream->Read(&plan)) {
      v1::StepResult result;
      result.set_step_id(plan.step_id());
      for (const v1::StepRow& row : plan.rows()) {
        v1::RowResult* out = result.add_rows();
        if (row.sample()) out->add_tokens(7);
      }
      if (!stream->Write(result)) break;
    }
    return grpc::Status::OK;
  }
};

class BatchRunTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<StartedServer> started =
        StartServer(ServerOptions{.address = "127.0.0.1:0"}, {&worker_});
    ASSERT_TRUE(started.ok()) << started.status();
    server_ = std::move(started->server);
    StepDriverOptions options;
    options.rank.kv.block_tokens = 4;
    options.rank.kv.compress_ratios = {1};
    options.rank.kv.num_blocks = 1024;
    options.rank.kv.num_seq_slots = 8;
    options.rank.max_model_len = 2048;
    options.rank.eos_token_ids = {0};
    absl::StatusOr<std::unique_ptr<StepDriver>> driver =
        StepDriver::Create({started->address}, options);
    ASSERT_TRUE(driver.ok()) << driver.status();
    driver_ = std::move(*driver);
    limits_.vocab_size = 1000;
    limits_.max_context_tokens = 2048;
    limits_.eos_token_ids = {0};
  }
  void TearDown() override {
    driver_.reset();
    server_->Shutdown();
  }

  // An item of prompt {5, 6, 7} with `max_new` new tokens.
  static v1::BatchItem Item(const std::string& id, uint32_t max_new) {
    v1::BatchItem item;
    item.set_custom_id(id);
    for (uint32_t t : {5u, 6u, 7u}) item.mutable_request()->mutable_tokens()->add_ids(t);
    item.mutable_request()->mutable_stop()->set_max_new_tokens(max_new);
    return item;
  }

  // Runs `request` to its Summary (pumping as its owner would) and returns
  // every message written; fails the test if the run does not end in 60 s.
  std::vector<v1::BatchEvent> Run(const v1::GenerateBatchRequest& request) {
    std::vector<v1::BatchEvent> written;
    BatchRun run(request, limits_,
                 BatchRun::Env{*driver_, /*tokenizer=*/nullptr, model_name_, next_request_},
                 [&](v1::BatchEvent event) { written.push_back(std::move(event)); });
    const absl::Time give_up = absl::Now() + absl::Seconds(60);
    while (!run.Pump(/*may_submit=*/true)) {
      if (absl::Now() > give_up) {
        ADD_FAILURE() << "the run did not end";
        run.CancelRunning();
        break;
      }
      absl::SleepFor(absl::Milliseconds(1));
    }
    return written;
  }

  // The item results of `events`, in the order written.
  static std::vector<v1::BatchEvent::ItemResult> Results(
      const std::vector<v1::BatchEvent>& events) {
    std::vector<v1::BatchEvent::ItemResult> results;
    for (const v1::BatchEvent& e : events) {
      if (e.has_item_result()) results.push_back(e.item_result());
    }
    return results;
  }

  SevensWorker worker_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<StepDriver> driver_;
  RequestLimits limits_;
  const std::string model_name_ = "fake";
  std::atomic<uint64_t> next_request_{1};
};

TEST_F(BatchRunTest, InputOrderWritesEveryResultInItsTurnThenTheSummary) {
  v1::GenerateBatchRequest request;
  request.set_ordering(v1::BATCH_ORDERING_INPUT_ORDER);
  // The long first item finishes last; input order still writes it first.
  const std::vector<uint32_t> max_new = {40, 1, 5, 2};
  for (size_t i = 0; i < max_new.size(); ++i) {
    *request.add_items() = Item("item-" + std::to_string(i), max_new[i]);
  }
  const std::vector<v1::BatchEvent> events = Run(request);
  ASSERT_FALSE(events.empty());
  ASSERT_TRUE(events.back().has_summary());
  EXPECT_EQ(events.back().summary().counts().total(), 4u);
  EXPECT_EQ(events.back().summary().counts().completed(), 4u);
  EXPECT_EQ(events.back().summary().counts().failed(), 0u);

  const std::vector<v1::BatchEvent::ItemResult> results = Results(events);
  ASSERT_EQ(results.size(), 4u);
  for (size_t i = 0; i < results.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(results[i].index(), i);
    EXPECT_EQ(results[i].custom_id(), "item-" + std::to_string(i));
    ASSERT_TRUE(results[i].has_result()) << results[i].error().message();
    ASSERT_EQ(results[i].result().samples_size(), 1);
    const v1::GenerateEvent::Final& final = results[i].result().samples(0);
    EXPECT_EQ(final.reason(), v1::FINISH_REASON_MAX_TOKENS);
    EXPECT_EQ(std::vector<uint32_t>(final.full_token_ids().begin(), final.full_token_ids().end()),
              std::vector<uint32_t>(max_new[i], 7));
  }
}

TEST_F(BatchRunTest, ABadItemFailsAloneAndTheSummaryCountsIt) {
  v1::GenerateBatchRequest request;
  *request.add_items() = Item("good-0", 3);
  v1::BatchItem bad = Item("bad", 3);
  bad.mutable_request()->set_model("another-model");
  *request.add_items() = bad;
  *request.add_items() = Item("good-2", 3);
  const std::vector<v1::BatchEvent> events = Run(request);
  ASSERT_FALSE(events.empty());
  ASSERT_TRUE(events.back().has_summary());
  EXPECT_EQ(events.back().summary().counts().completed(), 2u);
  EXPECT_EQ(events.back().summary().counts().failed(), 1u);
  int errors = 0;
  for (const v1::BatchEvent::ItemResult& r : Results(events)) {
    if (r.custom_id() == "bad") {
      ++errors;
      EXPECT_EQ(r.error().code(), static_cast<int>(absl::StatusCode::kNotFound))
          << r.error().message();
    } else {
      EXPECT_TRUE(r.has_result()) << r.custom_id() << ": " << r.error().message();
    }
  }
  EXPECT_EQ(errors, 1);
}

TEST_F(BatchRunTest, FailFastCancelsWhatHasNotRun) {
  v1::GenerateBatchRequest request;
  request.set_fail_fast(true);
  request.set_ordering(v1::BATCH_ORDERING_INPUT_ORDER);
  v1::BatchItem bad = Item("bad", 3);
  bad.mutable_request()->set_model("another-model");
  *request.add_items() = bad;
  for (int i = 1; i < 4; ++i) *request.add_items() = Item("later-" + std::to_string(i), 3);
  const std::vector<v1::BatchEvent> events = Run(request);
  const std::vector<v1::BatchEvent::ItemResult> results = Results(events);
  ASSERT_EQ(results.size(), 4u);
  EXPECT_EQ(results[0].error().code(), static_cast<int>(absl::StatusCode::kNotFound));
  for (size_t i = 1; i < results.size(); ++i) {
    EXPECT_EQ(results[i].error().code(), static_cast<int>(absl::StatusCode::kCancelled))
        << results[i].custom_id();
  }
  ASSERT_TRUE(events.back().has_summary());
  EXPECT_EQ(events.back().summary().counts().failed(), 1u);
  EXPECT_EQ(events.back().summary().counts().cancelled(), 3u);
  EXPECT_EQ(events.back().summary().counts().completed(), 0u);
}

TEST_F(BatchRunTest, AnItemPastItsTimeoutEndsWithDeadlineAndCountsAsFailed) {
  v1::GenerateBatchRequest request;
  // 1 ms: far less than 1,500 steps take, however fast the loopback.
  request.mutable_item_timeout()->set_nanos(1000000);
  *request.add_items() = Item("long", 1500);
  const std::vector<v1::BatchEvent> events = Run(request);
  const std::vector<v1::BatchEvent::ItemResult> results = Results(events);
  ASSERT_EQ(results.size(), 1u);
  ASSERT_TRUE(results[0].has_result()) << results[0].error().message();
  ASSERT_EQ(results[0].result().samples_size(), 1);
  EXPECT_EQ(results[0].result().samples(0).reason(), v1::FINISH_REASON_DEADLINE);
  EXPECT_LT(results[0].result().samples(0).full_token_ids_size(), 1500);
  ASSERT_TRUE(events.back().has_summary());
  EXPECT_EQ(events.back().summary().counts().failed(), 1u);
  EXPECT_EQ(events.back().summary().counts().completed(), 0u);
}

TEST(BatchRunMergeTest, ItemFieldsReplaceTheDefaultsWholeSubMessageBySubMessage) {
  v1::GenerateRequest defaults;
  defaults.set_text("default prompt");
  defaults.mutable_sampling()->set_temperature(0.5f);
  defaults.mutable_stop()->set_max_new_tokens(9);
  defaults.mutable_stop()->add_stop_strings("END");
  defaults.set_request_id("batch-default");
  v1::GenerateRequest item;
  item.mutable_tokens()->add_ids(3);
  item.mutable_stop()->set_max_new_tokens(2);  // replaces the whole StopParams
  const v1::GenerateRequest merged = MergeItem(defaults, item);
  EXPECT_EQ(merged.input_case(), v1::GenerateRequest::kTokens);
  EXPECT_FLOAT_EQ(merged.sampling().temperature(), 0.5f);
  EXPECT_EQ(merged.stop().max_new_tokens(), 2u);
  EXPECT_EQ(merged.stop().stop_strings_size(), 0);
  EXPECT_EQ(merged.request_id(), "");  // the item's, even when empty
}

TEST(BatchRunMergeTest, ItemTimeoutMustBeAPositiveDuration) {
  v1::GenerateBatchRequest request;
  EXPECT_TRUE(CheckItemTimeout(request).ok());
  request.mutable_item_timeout()->set_seconds(0);
  EXPECT_EQ(CheckItemTimeout(request).code(), absl::StatusCode::kInvalidArgument);
  request.mutable_item_timeout()->set_seconds(-1);
  EXPECT_EQ(CheckItemTimeout(request).code(), absl::StatusCode::kInvalidArgument);
  request.mutable_item_timeout()->set_seconds(1);
  request.mutable_item_timeout()->set_nanos(-5);
  EXPECT_EQ(CheckItemTimeout(request).code(), absl::StatusCode::kInvalidArgument);
  request.mutable_item_timeout()->set_nanos(5);
  EXPECT_TRUE(CheckItemTimeout(request).ok());
}

}  // namespace
}  // namespace weir::coordinator
