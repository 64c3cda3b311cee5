// base/peer_watchdog.h
//
// PeerWatchdog polls a peer's gRPC liveness (grpc.health.v1 Check of "") and
// calls `on_lost` once the peer has been unreachable for longer than
// `timeout`. Workers and the EPLB service use it to fence themselves off when
// their coordinator disappears, so no process outlives its cluster.
//
// Thread safety: thread-safe; `on_lost` runs once, on the watchdog thread.

#ifndef WEIR_BASE_PEER_WATCHDOG_H_
#define WEIR_BASE_PEER_WATCHDOG_H_

#include <functional>
#include <string>
#include <thread>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"

namespace weir {

class PeerWatchdog {
 public:
  // Starts polling `address` every `interval`.
  PeerWatchdog(std::string address, absl::Duration timeout, absl::Duration interval,
               std::function<void(const std::string& why)> on_lost);
  // Stops polling (without calling on_lost).
  ~PeerWatchdog();

  PeerWatchdog(const PeerWatchdog&) = delete;
  PeerWatchdog& operator=(const PeerWatchdog&) = delete;

 private:
  void Loop();

  const std::string address_;
  const absl::Duration timeout_;
  const absl::Duration interval_;
  std::function<void(const std::string&)> on_lost_;
  absl::Notification stop_;
  std::thread thread_;
};

// Serves until `stop` is notified or the coordinator at `coordinator` has
// been unreachable for `timeout` (then logs why). Afterwards marks `service`
// NOT_SERVING and shuts `server` down with a 2 s grace. Returns the process
// exit code: 0 when stopped, 1 when the coordinator was lost.
// REQUIRES: `stop` is notified at most once by others (this notifies it too).
int ServeUntilStoppedOrFenced(grpc::Server& server, const std::string& service,
                              const std::string& coordinator, absl::Duration timeout,
                              absl::Notification& stop);

}  // namespace weir

#endif  // WEIR_BASE_PEER_WATCHDOG_H_
