#include "base/peer_watchdog.h"

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
    const absl::Duration check_timeout = std::min(interval_, absl::Seconds(1));
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
