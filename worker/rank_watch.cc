#include "worker/rank_watch.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/grpc_util.h"
#include "proto/worker.grpc.pb.h"

namespace weir::worker {

std::optional<std::string> SupersededBy(const v1::PlacementInfo& placement,
                                        const RankIdentity& me) {
  if (placement.coordinator_epoch() != me.coordinator_epoch) {
    return absl::StrCat("the coordinator is a new run (epoch ", placement.coordinator_epoch(),
                        "; this worker registered with epoch ", me.coordinator_epoch, ")");
  }
  for (const v1::PeerInfo& peer : placement.workers()) {
    if (static_cast<int>(peer.rank()) != me.rank) continue;
    if (peer.address() == me.address) return std::nullopt;
    return absl::StrCat("rank ", me.rank, " is now held by the worker at ", peer.address(),
                        " (group epoch ", placement.group_epoch(), "): this worker at ",
                        me.address, " was replaced");
  }
  return absl::StrCat("the coordinator no longer lists this worker (", me.address,
                      ") for rank ", me.rank, ": it was found lost and its rank freed for a "
                      "rejoin");
}

RankWatch::RankWatch(std::string coordinator, RankIdentity me, absl::Duration interval,
                     std::function<void(const std::string& why)> on_superseded)
    : coordinator_(std::move(coordinator)),
      me_(std::move(me)),
      interval_(interval),
      on_superseded_(std::move(on_superseded)),
      thread_([this] { Loop(); }) {}

RankWatch::~RankWatch() {
  stop_.Notify();
  thread_.join();
}

void RankWatch::Loop() {
  auto stub = v1::Coordinator::NewStub(MakeChannel(coordinator_));
  v1::GetPlacementRequest request;
  request.set_workers_only(true);
  while (!stop_.WaitForNotificationWithTimeout(interval_)) {
    grpc::ClientContext context;
    context.set_deadline(DeadlineIn(std::chrono::milliseconds(std::max<int64_t>(
        1000, absl::ToInt64Milliseconds(interval_)))));
    v1::PlacementInfo placement;
    if (!stub->GetPlacement(&context, request, &placement).ok()) continue;
    if (std::optional<std::string> why = SupersededBy(placement, me_); why.has_value()) {
      on_superseded_(*why);
      return;
    }
  }
}

}  // namespace weir::worker
