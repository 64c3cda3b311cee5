#include "tools/bench/serve_workload.h"

#include <algorithm>

#include "gtest/gtest.h"

namespace weir::bench {
namespace {

WorkloadOptions Options() {
  return WorkloadOptions{.min_prompt_tokens = 3,
                         .max_prompt_tokens = 9,
                         .min_output_tokens = 2,
                         .max_output_tokens = 5,
                         .vocab_size = 16,
                         .excluded_ids = {0, 1, 2},
                         .seed = 7};
}

TEST(ServeWorkloadTest, LengthsAndIdsStayInRange) {
  absl::StatusOr<std::vector<RequestSpec>> requests = MakeRequests(Options(), 0, 500);
  ASSERT_TRUE(requests.ok()) << requests.status();
  ASSERT_EQ(requests->size(), 500u);
  std::vector<bool> seen_len(10, false), seen_id(16, false), seen_out(6, false);
  for (const RequestSpec& r : *requests) {
    ASSERT_GE(r.prompt.size(), 3u);
    ASSERT_LE(r.prompt.size(), 9u);
    ASSERT_GE(r.max_new_tokens, 2u);
    ASSERT_LE(r.max_new_tokens, 5u);
    seen_len[r.prompt.size()] = true;
    seen_out[r.max_new_tokens] = true;
    for (uint32_t id : r.prompt) {
      ASSERT_LT(id, 16u);
      ASSERT_GT(id, 2u) << "excluded id sampled";
      seen_id[id] = true;
    }
  }
  // Both ends of every range are reached.
  EXPECT_TRUE(seen_len[3] && seen_len[9]);
  EXPECT_TRUE(seen_out[2] && seen_out[5]);
  EXPECT_TRUE(seen_id[3] && seen_id[15]);
}

TEST(ServeWorkloadTest, SameSeedAndLevelSameRequestsOtherLevelOthers) {
  auto a = MakeRequests(Options(), 1, 20);
  auto b = MakeRequests(Options(), 1, 20);
  auto c = MakeRequests(Options(), 2, 20);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  int differ = 0;
  for (int i = 0; i < 20; ++i) {
    EXPECT_EQ((*a)[i].prompt, (*b)[i].prompt);
    EXPECT_EQ((*a)[i].max_new_tokens, (*b)[i].max_new_tokens);
    differ += (*a)[i].prompt != (*c)[i].prompt;
  }
  EXPECT_GT(differ, 15);
}

TEST(ServeWorkloadTest, BadOptionsAreInvalidArgument) {
  WorkloadOptions o = Options();
  o.max_prompt_tokens = 2;
  EXPECT_EQ(MakeRequests(o, 0, 1).status().code(), absl::StatusCode::kInvalidArgument);
  o = Options();
  o.min_output_tokens = 0;
  EXPECT_EQ(MakeRequests(o, 0, 1).status().code(), absl::StatusCode::kInvalidArgument);
  o = Options();
  o.vocab_size = 3;  // every id excluded
  EXPECT_EQ(MakeRequests(o, 0, 1).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(MakeRequests(Options(), 0, -1).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PoissonArrivals(0, 1, 0, 4).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ServeWorkloadTest, PoissonArrivalsIncreaseAtTheRequestedRate) {
  absl::StatusOr<std::vector<double>> arrivals = PoissonArrivals(50.0, 3, 0, 20000);
  ASSERT_TRUE(arrivals.ok()) << arrivals.status();
  EXPECT_TRUE(std::is_sorted(arrivals->begin(), arrivals->end()));
  EXPECT_GT(arrivals->front(), 0.0);
  // 20000 arrivals at 50/s take ~400 s; the mean gap's standard error is 0.7%.
  EXPECT_NEAR(arrivals->back(), 400.0, 12.0);
}

}  // namespace
}  // namespace weir::bench
