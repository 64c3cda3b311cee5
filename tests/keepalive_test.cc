// Keepalive on control-plane streams (base/grpc_util.h MakeChannel): a peer
// that freezes without closing its socket (SIGSTOP here; a powered-off host
// or a half-open TCP connection alike) ends the client's open stream with
// UNAVAILABLE within keepalive time + timeout. Without keepalive the same
// stream is still waiting at the test's deadline. The peer is a real worker
// process (its gRPC server answers while it retries registering with an
// absent coordinator); the stream is its health service's Watch.

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "base/grpc_util.h"
#include "gtest/gtest.h"
#include "proto/health.grpc.pb.h"

namespace weir {
namespace {

std::string Runfile(const std::string& path) {
  return std::string(std::getenv("TEST_SRCDIR")) + "/weir/" + path;
}

// A port nothing listens on now (bound, read back, closed).
int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  EXPECT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  close(fd);
  return ntohs(addr.sin_port);
}

class FrozenPeerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    address_ = "127.0.0.1:" + std::to_string(FreePort());
    const std::vector<std::string> argv = {
        Runfile("worker/main"), "--coordinator=127.0.0.1:1", "--listen=" + address_,
        "--register_timeout_s=600", "--coordinator_timeout_s=600"};
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    pid_ = fork();
    if (pid_ == 0) {
      execv(args[0], args.data());
      _exit(127);
    }
    ASSERT_GT(pid_, 0);
  }
  void TearDown() override {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }

  // Opens Health.Watch on a channel with `keepalive`, waits for the first
  // status, freezes the peer, and returns how the stream ended and when
  // (the client's deadline: `limit`).
  grpc::Status WatchThenFreeze(ChannelKeepalive keepalive, absl::Duration limit,
                               absl::Duration& took) {
    auto channel = MakeChannel(address_, kControlMaxMessageBytes, keepalive);
    // The worker's server comes up within a few seconds.
    const absl::Time ready_by = absl::Now() + absl::Seconds(60);
    while (!CheckHealth(*channel, "", std::chrono::seconds(1)).ok() && absl::Now() < ready_by) {
      absl::SleepFor(absl::Milliseconds(100));
    }
    auto stub = grpc::health::v1::Health::NewStub(channel);
    grpc::ClientContext context;
    context.set_deadline(DeadlineIn(std::chrono::milliseconds(absl::ToInt64Milliseconds(limit))));
    grpc::health::v1::HealthCheckRequest request;
    auto reader = stub->Watch(&context, request);
    grpc::health::v1::HealthCheckResponse response;
    EXPECT_TRUE(reader->Read(&response));
    EXPECT_EQ(kill(pid_, SIGSTOP), 0);
    const absl::Time frozen = absl::Now();
    while (reader->Read(&response)) {
    }
    grpc::Status status = reader->Finish();
    took = absl::Now() - frozen;
    kill(pid_, SIGCONT);
    return status;
  }

  std::string address_;
  pid_t pid_ = -1;
};

TEST_F(FrozenPeerTest, KeepaliveEndsTheStream) {
  absl::Duration took;
  const grpc::Status status = WatchThenFreeze(
      {.time = std::chrono::milliseconds(10000), .timeout = std::chrono::milliseconds(2000)},
      absl::Seconds(60), took);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE) << status.error_message();
  // One keepalive period (the first ping goes out up to `time` after the
  // last traffic) plus the timeout, with slack for a loaded machine.
  EXPECT_LT(took, absl::Seconds(30)) << absl::FormatDuration(took);
  std::printf("frozen peer detected after %s: %s\n", absl::FormatDuration(took).c_str(),
              status.error_message().c_str());
}

TEST_F(FrozenPeerTest, WithoutKeepaliveTheStreamWaits) {
  absl::Duration took;
  const grpc::Status status = WatchThenFreeze(
      {.time = std::chrono::milliseconds(3600000), .timeout = std::chrono::milliseconds(20000)},
      absl::Seconds(16), took);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << status.error_message();
}

}  // namespace
}  // namespace weir
