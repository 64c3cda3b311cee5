// worker/rank_watch.h
//
// RankWatch tells a registered worker when the coordinator no longer counts
// it as the holder of its rank: another worker registered for the rank (it
// replaced this one, e.g. while this one was stopped), the rank was freed
// for a rejoin (this worker was found lost), or the coordinator that answers
// is another run than the one this worker registered with. Nothing will
// call such a worker again; it fences itself off and exits
// (worker/main.cc, exit code kExitSuperseded) so that a supervisor can start
// it afresh, and its old group's work in flight is aborted on the way out.
//
// It polls the coordinator's GetPlacement (workers only) every `interval`;
// an unreachable coordinator is PeerWatchdog's business, not this one's.
//
// Thread safety: thread-safe; `on_superseded` runs at most once, on the
// watch's thread.

#ifndef WEIR_WORKER_RANK_WATCH_H_
#define WEIR_WORKER_RANK_WATCH_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <thread>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "proto/worker.pb.h"

namespace weir::worker {

// The exit code of a worker that learned it was superseded (documented in
// worker/README.md; 0: stopped, 1: coordinator lost or start-up failed,
// 2: bad flags).
inline constexpr int kExitSuperseded = 3;

// What the coordinator told this worker at registration.
struct RankIdentity {
  uint64_t coordinator_epoch = 0;
  int rank = -1;
  // The address this worker registered (RegisterRequest.address).
  std::string address;
};

// Returns why `placement` shows that `me` no longer holds its rank, or
// nullopt while it does.
std::optional<std::string> SupersededBy(const v1::PlacementInfo& placement,
                                        const RankIdentity& me);

class RankWatch {
 public:
  // Starts polling the coordinator at `coordinator` every `interval`.
  RankWatch(std::string coordinator, RankIdentity me, absl::Duration interval,
            std::function<void(const std::string& why)> on_superseded);
  // Stops polling and joins the thread (without calling on_superseded).
  ~RankWatch();

  RankWatch(const RankWatch&) = delete;
  RankWatch& operator=(const RankWatch&) = delete;

 private:
  void Loop();

  const std::string coordinator_;
  const RankIdentity me_;
  const absl::Duration interval_;
  std::function<void(const std::string&)> on_superseded_;
  absl::Notification stop_;
  std::thread thread_;
};

}  // namespace weir::worker

#endif  // WEIR_WORKER_RANK_WATCH_H_
