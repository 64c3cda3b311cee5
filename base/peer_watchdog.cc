#include "base/peer_watchdog.h"

#include <algorithm>
#include <atomic>

#include "absl/strings/str_cat.h"
#include "base/grpc_util.h"
#include "base/logging.h"

namespace weir {

PeerWatchdog::PeerWatchdog(std::string address, absl::Duration timeout, absl::Duration interval,
                           std::function<void(const std::string& why)> on_lost)
    : address_(std::move(address)),
      timeout_(timeout),
      interval_(interval),
      on_lost_(std::move(on_lost)),
      thread_([this] { Loop(); }) {}

PeerWatchdog::~PeerWatchdog() {
  stop_.Notify();
  thread_.join();
}

void PeerWatchdog::Loop() {
  auto channel = MakeChannel(address_);
  absl::Time last_seen = absl::Now();
  while (!stop_.WaitForNotificationWithTimeout(interval_)) {
    // A slow answer is an answer: the check may take what is left of the timeout (at
    // least a second), so a peer that is alive but starved of CPU (64 local workers on
    // two loaded cores) is not declared lost; a stopped or vanished one still is, within
    // the timeout plus a second.
    const absl::Duration check_timeout =
        std::max(absl::Seconds(1), timeout_ - (absl::Now() - last_seen));
    absl::StatusOr<std::string> health =
        CheckHealth(*channel, "", absl::ToChronoMilliseconds(check_timeout));
    if (health.ok()) {
      last_seen = absl::Now();
      continue;
    }
    if (absl::Now() - last_seen > timeout_) {
      on_lost_(absl::StrCat(address_, " unreachable for ",
                            absl::FormatDuration(absl::Now() - last_seen), ": ",
                            health.status().ToString()));
      return;
    }
  }
}

int ServeUntilStoppedOrFenced(grpc::Server& server, const std::string& service,
                              const std::string& coordinator, absl::Duration timeout,
                              absl::Notification& stop) {
  std::atomic<int> exit_code{0};
  {
    PeerWatchdog watchdog(coordinator, timeout, absl::Milliseconds(500),
                          [&](const std::string& why) {
                            WEIR_LOG(ERROR) << "coordinator lost (" << why << "); exiting";
                            exit_code = 1;
                            if (!stop.HasBeenNotified()) stop.Notify();
                          });
    stop.WaitForNotification();
  }
  server.GetHealthCheckService()->SetServingStatus(service, false);
  server.Shutdown(DeadlineIn(std::chrono::seconds(2)));
  WEIR_LOG(INFO) << "stopped";
  return exit_code.load();
}

}  // namespace weir
