// PeerWatchdog against a real gRPC health service whose answers the test delays:
// a slow peer is alive, a silent or absent one is lost.

#include "base/peer_watchdog.h"

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <memory>
#include <string>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "proto/health.grpc.pb.h"

namespace weir {
namespace {

// Answers SERVING after `delay`; with `hang` it answers only at shutdown.
class DelayedHealth final : public grpc::health::v1::Health::Service {
 public:
  DelayedHealth(absl::Duration delay, bool hang) : delay_(delay), hang_(hang) {}

  grpc::Status Check(grpc::ServerContext* context,
                     const grpc::health::v1::HealthCheckRequest* /*request*/,
                     grpc::health::v1::HealthCheckResponse* response) override {
    calls_.fetch_add(1);
    if (hang_) {
      while (!released_.WaitForNotificationWithTimeout(absl::Milliseconds(50))) {
        if (context->IsCancelled()) return grpc::Status::CANCELLED;
      }
    } else {
      absl::SleepFor(delay_);
    }
    response->set_status(grpc::health::v1::HealthCheckResponse::SERVING);
    return grpc::Status::OK;
  }

  void Release() {
    if (!released_.HasBeenNotified()) released_.Notify();
  }
  int calls() const { return calls_.load(); }

 private:
  const absl::Duration delay_;
  const bool hang_;
  absl::Notification released_;
  std::atomic<int> calls_{0};
};

struct Peer {
  explicit Peer(absl::Duration delay, bool hang = false) : service(delay, hang) {
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&service);
    server = builder.BuildAndStart();
    address = "127.0.0.1:" + std::to_string(port);
  }
  ~Peer() {
    service.Release();
    server->Shutdown();
  }
  DelayedHealth service;
  std::unique_ptr<grpc::Server> server;
  std::string address;
};

TEST(PeerWatchdogTest, APeerThatAnswersSlowlyIsNotLost) {
  // Every answer takes 1.5 s, longer than the poll interval; the timeout is 3 s. The
  // watchdog once gave each check min(interval, 1 s) and declared this peer lost.
  Peer peer(absl::Milliseconds(1500));
  absl::Notification lost;
  {
    PeerWatchdog watchdog(peer.address, absl::Seconds(3), absl::Milliseconds(100),
                          [&](const std::string&) { lost.Notify(); });
    EXPECT_FALSE(lost.WaitForNotificationWithTimeout(absl::Seconds(8)));
  }
  EXPECT_GE(peer.service.calls(), 3);
}

TEST(PeerWatchdogTest, APeerThatNeverAnswersIsLostAfterTheTimeout) {
  Peer peer(absl::ZeroDuration(), /*hang=*/true);
  absl::Notification lost;
  std::string why;
  const absl::Time start = absl::Now();
  PeerWatchdog watchdog(peer.address, absl::Seconds(1), absl::Milliseconds(100),
                        [&](const std::string& reason) {
                          why = reason;
                          lost.Notify();
                        });
  // Generous deadline for a loaded machine; the event ends the wait.
  ASSERT_TRUE(lost.WaitForNotificationWithTimeout(absl::Seconds(60)));
  EXPECT_GE(absl::Now() - start, absl::Seconds(1));
  EXPECT_NE(why.find("unreachable"), std::string::npos) << why;
}

TEST(PeerWatchdogTest, AnAbsentPeerIsLost) {
  std::string address;
  {
    Peer gone(absl::ZeroDuration());
    address = gone.address;
  }
  absl::Notification lost;
  PeerWatchdog watchdog(address, absl::Milliseconds(500), absl::Milliseconds(100),
                        [&](const std::string&) { lost.Notify(); });
  ASSERT_TRUE(lost.WaitForNotificationWithTimeout(absl::Seconds(60)));
}

}  // namespace
}  // namespace weir
