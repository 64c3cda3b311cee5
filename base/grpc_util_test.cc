#include "base/grpc_util.h"

#include "gtest/gtest.h"
#include "proto/health.grpc.pb.h"
#include "proto/worker.grpc.pb.h"

namespace weir {
namespace {

TEST(GrpcUtilTest, StatusCodesRoundTrip) {
  for (int code = 0; code <= 16; ++code) {
    absl::Status status(static_cast<absl::StatusCode>(code), code == 0 ? "" : "why");
    absl::Status back = FromGrpcStatus(ToGrpcStatus(status));
    EXPECT_EQ(back.code(), status.code());
    EXPECT_EQ(back.message(), status.message());
  }
}

TEST(GrpcUtilTest, ServerStartsOnFreePortWithHealth) {
  // A service with no methods stands in for a real one: its name is what
  // health reports on.
  weir::v1::Coordinator::Service placeholder;
  absl::StatusOr<StartedServer> started = StartServer({.address = "127.0.0.1:0"}, {&placeholder});
  ASSERT_TRUE(started.ok()) << started.status();
  EXPECT_GT(started->port, 0);
  EXPECT_EQ(started->address, "127.0.0.1:" + std::to_string(started->port));

  auto channel = MakeChannel(started->address);
  absl::StatusOr<std::string> overall = CheckHealth(*channel, "", std::chrono::seconds(5));
  ASSERT_TRUE(overall.ok()) << overall.status();
  EXPECT_EQ(*overall, "SERVING");

  started->server->GetHealthCheckService()->SetServingStatus("weir.v1.Coordinator", false);
  EXPECT_EQ(*CheckHealth(*channel, "weir.v1.Coordinator", std::chrono::seconds(5)), "NOT_SERVING");
  started->server->GetHealthCheckService()->SetServingStatus("weir.v1.Coordinator", true);
  EXPECT_EQ(*CheckHealth(*channel, "weir.v1.Coordinator", std::chrono::seconds(5)), "SERVING");
  EXPECT_EQ(CheckHealth(*channel, "no.such.Service", std::chrono::seconds(5)).status().code(),
            absl::StatusCode::kNotFound);
  started->server->Shutdown();
}

TEST(GrpcUtilTest, BusyPortIsUnavailable) {
  weir::v1::Coordinator::Service placeholder;
  auto first = StartServer({.address = "127.0.0.1:0"}, {&placeholder});
  ASSERT_TRUE(first.ok());
  weir::v1::Coordinator::Service other;
  auto second = StartServer({.address = first->address}, {&other});
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  first->server->Shutdown();
}

TEST(GrpcUtilTest, HealthOfUnreachablePeerFailsWithinTimeout) {
  auto channel = MakeChannel("127.0.0.1:1");
  auto start = std::chrono::steady_clock::now();
  absl::StatusOr<std::string> result = CheckHealth(*channel, "", std::chrono::milliseconds(300));
  EXPECT_FALSE(result.ok());
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(3));
}

}  // namespace
}  // namespace weir
