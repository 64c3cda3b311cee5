// 1,000 concurrent Generate streams on a 2-worker tiny cluster (CPU): every
// stream finishes OK, health stays SERVING on the public server and on the
// control plane throughout (what local workers and EPLB watch), and the
// coordinator's thread count stays bounded: the public API holds no thread
// per stream (issue 21). The deadlines are generous; nothing here is timed.

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/local_cluster.h"
#include "tools/bench/stream_load.h"

namespace weir {
namespace {

// The coordinator's threads while 1,000 streams are open. Idle it has about
// 100 (gRPC's pollers and executors, the HTTP server's pool, the step loop,
// the monitor, the call executor); with a thread per stream it had over
// 1,000.
constexpr int kMaxThreads = 250;
constexpr int kStreams = 1000;

TEST(LoadTest, ThousandStreamsFinishWhileHealthStaysServing) {
  testing_util::Cluster cluster({"--workers=2"});
  const std::string control = bench::ControlAddressOfChildren(cluster.pid());
  ASSERT_FALSE(control.empty()) << "no child names the control plane";
  ASSERT_NE(control, cluster.address());
  const auto [idle_threads, idle_rss_kb] = bench::ProcessThreadsAndRss(cluster.pid());

  bench::LoadSampler sampler({.public_address = cluster.address(),
                              .control_address = control,
                              .pid = cluster.pid(),
                              .interval = absl::Milliseconds(250),
                              .health_deadline = absl::Seconds(5)});
  const bench::StreamLoadReport load = bench::RunStreamLoad({.address = cluster.address(),
                                                             .streams = kStreams,
                                                             .prompt_tokens = 8,
                                                             .max_new_tokens = 4,
                                                             .deadline = absl::Minutes(8)});
  const bench::SamplerReport watched = sampler.Stop();

  std::string others;
  for (const auto& [code, count] : load.other) {
    absl::StrAppend(&others, code, " x", count, " (", load.other_example.at(code), ") ");
  }
  EXPECT_EQ(load.ok, kStreams) << "RESOURCE_EXHAUSTED " << load.resource_exhausted << "; "
                               << others;
  EXPECT_EQ(load.tokens, static_cast<uint64_t>(kStreams) * 4);
  EXPECT_GT(watched.public_health.checks, 0);
  EXPECT_EQ(watched.public_health.not_serving, 0) << watched.public_health.first_failure;
  EXPECT_GT(watched.control_health.checks, 0);
  EXPECT_EQ(watched.control_health.not_serving, 0) << watched.control_health.first_failure;
  EXPECT_GT(watched.max_threads, 0);
  EXPECT_LE(watched.max_threads, kMaxThreads) << "idle " << idle_threads;
  // The numbers, for the log.
  std::printf(
      "%d streams: %d ok in %.1f s, %.0f tokens/s, p50 %.0f ms, p99 %.0f ms; coordinator threads "
      "idle %d, max %d; RSS idle %.0f MiB, max %.0f MiB; control health p50 %.1f ms, max %.1f "
      "ms; public health p50 %.1f ms, max %.1f ms\n",
      kStreams, load.ok, absl::ToDoubleSeconds(load.wall), load.tokens_per_second(), load.p50_ms,
      load.p99_ms, idle_threads, watched.max_threads, idle_rss_kb / 1024.0,
      watched.max_rss_kb / 1024.0, watched.control_health.p50_ms, watched.control_health.max_ms,
      watched.public_health.p50_ms, watched.public_health.max_ms);

  // Still serving afterwards.
  std::vector<uint32_t> tokens;
  EXPECT_TRUE(cluster.Greedy({10, 20, 30}, 4, tokens).ok());
  EXPECT_EQ(tokens.size(), 4u);
}

}  // namespace
}  // namespace weir
