#include "tools/bench/serve_stats.h"

#include "gtest/gtest.h"

namespace weir::bench {
namespace {

TEST(ServeStatsTest, PercentileIsNearestRank) {
  std::vector<double> v;
  for (int i = 100; i >= 1; --i) v.push_back(i);  // unsorted on purpose
  EXPECT_EQ(Percentile(v, 0.5), 50);
  EXPECT_EQ(Percentile(v, 0.9), 90);
  EXPECT_EQ(Percentile(v, 0.99), 99);
  EXPECT_EQ(Percentile(v, 1.0), 100);
  EXPECT_EQ(Percentile(v, 0.0), 1);
  EXPECT_EQ(Percentile({7, 3}, 0.5), 3);
  EXPECT_EQ(Percentile({7, 3}, 0.51), 7);
  EXPECT_EQ(Percentile({}, 0.5), 0);
}

RequestRecord Ok(double ttft, double e2e, std::vector<double> itl) {
  RequestRecord r;
  r.ok = true;
  r.ttft_ms = ttft;
  r.e2e_ms = e2e;
  r.itl_ms = std::move(itl);
  r.output_tokens = static_cast<uint32_t>(r.itl_ms.size() + 1);
  return r;
}

TEST(ServeStatsTest, SummaryCountsOnlySuccessfulRequests) {
  RequestRecord failed;
  failed.error = "UNAVAILABLE: gone";
  failed.output_tokens = 100;  // partial output of a failed request is not counted
  std::vector<RequestRecord> records = {Ok(10, 40, {10, 10, 10}), Ok(20, 60, {20, 20}), failed};
  LevelSummary s = Summarize(records, 2.0);
  EXPECT_EQ(s.requests, 3);
  EXPECT_EQ(s.failed, 1);
  EXPECT_EQ(s.first_error, "UNAVAILABLE: gone");
  EXPECT_EQ(s.output_tokens, 7);
  EXPECT_DOUBLE_EQ(s.requests_per_s, 1.0);
  EXPECT_DOUBLE_EQ(s.output_tokens_per_s, 3.5);
  EXPECT_EQ(s.ttft_p50, 10);
  EXPECT_EQ(s.ttft_p99, 20);
  EXPECT_EQ(s.itl_p50, 10);  // {10,10,10,20,20}
  EXPECT_EQ(s.itl_p90, 20);
  EXPECT_EQ(s.e2e_p50, 40);
  // 5 tokens after the first in (30 + 40) ms of decoding.
  EXPECT_NEAR(s.decode_tokens_per_s_per_seq, 5 / 0.070, 1e-9);
}

}  // namespace
}  // namespace weir::bench
