// LoadReporter against a real EplbService over gRPC: what it logs.

#include "eplb/load_reporter.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "base/grpc_util.h"
#include "eplb/eplb_service.h"
#include "gtest/gtest.h"

namespace weir::eplb {
namespace {

void EnqueueOne(LoadReporter& reporter) {
  reporter.Enqueue(/*rank=*/0, /*step_id=*/1, /*num_layers=*/1, /*num_logical=*/4, {1, 2, 3, 4},
                   /*map_version=*/0, {10});
}

// Stopping a reporter whose stream is open cancels the stream itself: that
// is not an EPLB failure and is not logged as one (every worker's shutdown
// printed "EPLB ReportLoad ended: CANCELLED" before).
TEST(LoadReporterTest, StopsQuietlyWhileItsStreamIsOpen) {
  EplbService service(/*window_size=*/100, /*rebalancer=*/nullptr);
  service.SetWorldSize(1);
  absl::StatusOr<StartedServer> server = StartServer({.address = "127.0.0.1:0"}, {&service});
  ASSERT_TRUE(server.ok()) << server.status();
  auto reporter = std::make_unique<LoadReporter>(server->address);
  EnqueueOne(*reporter);
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (reporter->sent() == 0 && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(5));
  ASSERT_EQ(reporter->sent(), 1u);
  ::testing::internal::CaptureStderr();
  reporter.reset();
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(log.find("ReportLoad ended"), std::string::npos) << log;
  server->server->Shutdown();
}

// A report EPLB cannot take (nothing listens) is dropped and logged once:
// the warning the test above must not see is still there for real failures.
TEST(LoadReporterTest, LogsAReportThatCannotBeSent) {
  ::testing::internal::CaptureStderr();
  {
    LoadReporter reporter("127.0.0.1:1");
    EnqueueOne(reporter);
    const absl::Time deadline = absl::Now() + absl::Seconds(20);
    while (reporter.dropped() == 0 && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(5));
    }
    EXPECT_EQ(reporter.dropped(), 1u);
  }
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find("ReportLoad ended"), std::string::npos) << log;
}

}  // namespace
}  // namespace weir::eplb
