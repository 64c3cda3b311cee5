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

TEST(ServeStatsTest, CsvRowsMatchTheHeader) {
  RequestRecord r = Ok(12.5, 300, {10, 20, 30});
  r.prompt_tokens = 17;
  r.output_tokens = 4;
  r.start_ms = 1.25;
  EXPECT_EQ(CsvHeader(),
            "level,concurrency,ok,start_ms,ttft_ms,e2e_ms,prompt_tokens,output_tokens,"
            "itl_mean_ms,itl_max_ms\n");
  EXPECT_EQ(CsvRow("c=4", 4, r), "c=4,4,1,1.250,12.500,300.000,17,4,20.000,30.000\n");
  RequestRecord failed;
  EXPECT_EQ(CsvRow("rate=3", 0, failed), "rate=3,0,0,0.000,0.000,0.000,0,0,0.000,0.000\n");
}

}  // namespace
}  // namespace weir::bench
