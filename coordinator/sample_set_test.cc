#include "coordinator/sample_set.h"

#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace weir::coordinator {
namespace {

BuiltRequest Built(uint32_t samples) {
  BuiltRequest built;
  built.prompt = {5, 6, 7};
  built.max_new_tokens = 2;
  built.seed = 100;
  built.num_samples = samples;
  return built;
}

SeqEvent Tokens(std::vector<uint32_t> tokens, bool last) {
  SeqEvent event;
  event.tokens = std::move(tokens);
  if (last) event.finish = scheduler::FinishReason::kMaxTokens;
  return event;
}

// Records submissions; refuses the `refuse_at`-th call (0-based; a call is
// one group) with `refusal`.
struct FakeLoop {
  std::vector<SeqSubmission> submitted;
  std::vector<RequestId> cancelled;
  int calls = 0;
  int refuse_at = -1;
  absl::Status refusal = absl::ResourceExhaustedError("full");
  uint64_t next_id = 10;

  std::function<RequestId()> ids() {
    return [this] { return RequestId(next_id++); };
  }
  std::vector<size_t> group_sizes;
  std::function<absl::Status(std::vector<SeqSubmission>)> submit() {
    return [this](std::vector<SeqSubmission> group) {
      if (calls++ == refuse_at) return refusal;
      group_sizes.push_back(group.size());
      for (SeqSubmission& s : group) submitted.push_back(std::move(s));
      return absl::OkStatus();
    };
  }
  std::function<void(RequestId)> cancel() {
    return [this](RequestId id) { cancelled.push_back(id); };
  }
};

TEST(SampleSetTest, SamplesAreSeededInOrderAndForkTheFirst) {
  SampleSet set(Built(3), nullptr, absl::Now());
  FakeLoop loop;
  auto queue = std::make_shared<SeqEventQueue>();
  ASSERT_TRUE(set.SubmitRest(loop.ids(), loop.submit(), queue, EventIndex(4, 0)).ok());
  ASSERT_EQ(loop.submitted.size(), 3u);
  for (uint32_t i = 0; i < 3; ++i) {
    const SeqSubmission& s = loop.submitted[i];
    EXPECT_EQ(s.request.id, RequestId(10 + i));
    EXPECT_EQ(s.seed, 100u + i) << "sample " << i;
    if (i == 0) {
      EXPECT_FALSE(s.request.fork_of.has_value());
    } else {
      EXPECT_EQ(s.request.fork_of, RequestId(10)) << "sample " << i;
    }
    s.sink(Tokens({static_cast<uint32_t>(20 + i)}, false));
  }
  // Each sample's events come under its own index of item 4.
  for (uint32_t i = 0; i < 3; ++i) {
    auto event = queue->Pop(absl::ZeroDuration());
    ASSERT_TRUE(event.has_value());
    EXPECT_EQ(SplitEventIndex(event->first), std::make_pair(size_t{4}, i));
  }
}

TEST(SampleSetTest, PromptLogprobsPrefillEverySampleItself) {
  BuiltRequest built = Built(2);
  built.prompt_logprobs = 0;
  SampleSet set(std::move(built), nullptr, absl::Now());
  FakeLoop loop;
  ASSERT_TRUE(set.SubmitRest(loop.ids(), loop.submit(), std::make_shared<SeqEventQueue>(), 0)
                  .ok());
  ASSERT_EQ(loop.submitted.size(), 2u);
  EXPECT_FALSE(loop.submitted[1].request.fork_of.has_value());
}

TEST(SampleSetTest, ResultHasEverySampleInOrderOnceAllEnded) {
  SampleSet set(Built(3), nullptr, absl::Now());
  FakeLoop loop;
  ASSERT_TRUE(set.SubmitRest(loop.ids(), loop.submit(), std::make_shared<SeqEventQueue>(), 0)
                  .ok());
  // Sample 2 ends first, then 0, then 1.
  SampleSet::Update u = set.Apply(2, Tokens({32, 33}, true));
  EXPECT_FALSE(u.done);
  EXPECT_EQ(u.delta.sample_index(), 2u);
  EXPECT_EQ(u.delta.token_ids_size(), 2);
  EXPECT_FALSE(set.Apply(0, Tokens({30}, false)).done);
  EXPECT_FALSE(set.Apply(0, Tokens({31}, true)).done);
  EXPECT_FALSE(set.Apply(2, Tokens({99}, true)).done);  // after its end: ignored
  EXPECT_TRUE(set.Apply(1, Tokens({40, 41}, true)).done);
  ASSERT_TRUE(set.done());
  const v1::GenerateResult result = set.Result();
  ASSERT_EQ(result.samples_size(), 3);
  const std::vector<std::vector<uint32_t>> want = {{30, 31}, {40, 41}, {32, 33}};
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(result.samples(i).sample_index(), static_cast<uint32_t>(i));
    EXPECT_EQ(std::vector<uint32_t>(result.samples(i).full_token_ids().begin(),
                                    result.samples(i).full_token_ids().end()),
              want[i]);
    EXPECT_EQ(result.samples(i).reason(), v1::FINISH_REASON_MAX_TOKENS);
  }
  EXPECT_EQ(result.accepted().prompt_tokens(), 3u);
  EXPECT_EQ(result.accepted().server_request_id(), "weir-10");
  EXPECT_EQ(set.ItemReason(), v1::FINISH_REASON_MAX_TOKENS);
}

// The samples go as one group (so the step loop sees them together and the
// others fork sample 0); a refused group submits nothing and the next call
// tries every sample again with fresh ids.
TEST(SampleSetTest, RefusedGroupResumesWithFreshIds) {
  SampleSet set(Built(3), nullptr, absl::Now());
  FakeLoop loop;
  loop.refuse_at = 0;
  auto queue = std::make_shared<SeqEventQueue>();
  absl::Status s = set.SubmitRest(loop.ids(), loop.submit(), queue, 0);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(set.submitted(), 0u);
  EXPECT_EQ(set.running(), 0u);
  EXPECT_FALSE(set.all_submitted());
  ASSERT_TRUE(set.SubmitRest(loop.ids(), loop.submit(), queue, 0).ok());
  ASSERT_EQ(loop.group_sizes, std::vector<size_t>{3});
  ASSERT_EQ(loop.submitted.size(), 3u);
  EXPECT_EQ(loop.submitted[0].request.id, RequestId(13));  // 10 - 12 went to the refused try
  EXPECT_EQ(loop.submitted[1].seed, 101u);
  EXPECT_EQ(loop.submitted[2].request.fork_of, RequestId(13));
  EXPECT_EQ(set.running(), 3u);
  EXPECT_TRUE(set.SubmitRest(loop.ids(), loop.submit(), queue, 0).ok());  // nothing left
  EXPECT_EQ(loop.calls, 2);
}

TEST(SampleSetTest, FailedSampleFailsTheItemAndAbandonStopsTheOthers) {
  SampleSet set(Built(3), nullptr, absl::Now());
  FakeLoop loop;
  ASSERT_TRUE(set.SubmitRest(loop.ids(), loop.submit(), std::make_shared<SeqEventQueue>(), 0)
                  .ok());
  EXPECT_FALSE(set.Apply(0, Tokens({1, 2}, true)).done);
  SeqEvent failed;
  failed.error = absl::InternalError("NaN logits");
  SampleSet::Update u = set.Apply(1, failed);
  EXPECT_EQ(u.error.code(), absl::StatusCode::kInternal);
  set.Abandon(loop.cancel());
  EXPECT_EQ(loop.cancelled, std::vector<RequestId>{RequestId(12)});
  EXPECT_EQ(set.running(), 0u);
  EXPECT_FALSE(set.Apply(2, Tokens({1}, true)).done);  // ignored
}

TEST(SampleSetTest, CancelRunningWaitsForTheLoopAndEndRunningSetsTheReason) {
  SampleSet set(Built(2), nullptr, absl::Now());
  FakeLoop loop;
  ASSERT_TRUE(set.SubmitRest(loop.ids(), loop.submit(), std::make_shared<SeqEventQueue>(), 0)
                  .ok());
  set.CancelRunning(loop.cancel());
  EXPECT_EQ(loop.cancelled.size(), 2u);
  EXPECT_EQ(set.running(), 2u);  // until the loop answers
  SeqEvent cancelled;
  cancelled.finish = scheduler::FinishReason::kCancelled;
  set.Apply(0, cancelled);
  // The item runs past its deadline: sample 1 keeps its tokens, reason DEADLINE.
  set.Apply(1, Tokens({8}, false));
  set.EndRunning(v1::FINISH_REASON_DEADLINE, loop.cancel());
  ASSERT_TRUE(set.done());
  const v1::GenerateResult result = set.Result();
  ASSERT_EQ(result.samples_size(), 2);
  EXPECT_EQ(result.samples(1).reason(), v1::FINISH_REASON_DEADLINE);
  EXPECT_EQ(result.samples(1).full_token_ids_size(), 1);
  EXPECT_EQ(set.ItemReason(), v1::FINISH_REASON_CANCELLED);
}

}  // namespace
}  // namespace weir::coordinator
