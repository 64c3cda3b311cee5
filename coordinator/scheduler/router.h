// coordinator/scheduler/router.h
//
// Router: picks the DP rank a new request runs on. The interface lets a
// prefix-cache-aware router (which also looks at the prompt) replace the
// load-only LeastLoadedRouter without touching the callers.
//
// Thread safety: implementations document their own; LeastLoadedRouter is
// stateless and safe to call concurrently.

#ifndef WEIR_COORDINATOR_SCHEDULER_ROUTER_H_
#define WEIR_COORDINATOR_SCHEDULER_ROUTER_H_

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "base/strong_id.h"
#include "coordinator/scheduler/step_plan.h"

namespace weir::coordinator::scheduler {

class Router {
 public:
  virtual ~Router() = default;

  // Returns the rank (an index into `loads`) for `request`. `loads`
  // [num_ranks] must be current: taken after the previous request was added,
  // so a burst spreads out. INVALID_ARGUMENT if `loads` is empty.
  virtual absl::StatusOr<Rank> Route(const SeqRequest& request,
                                     absl::Span<const RankLoad> loads) = 0;
};

// Chooses the rank with the lowest projected KV use,
//   (used blocks + blocks the waiting queue will take) / pool blocks,
// then the fewest queued and admitted sequences, then the lowest rank.
class LeastLoadedRouter : public Router {
 public:
  absl::StatusOr<Rank> Route(const SeqRequest& request, absl::Span<const RankLoad> loads) override;
};

}  // namespace weir::coordinator::scheduler

#endif  // WEIR_COORDINATOR_SCHEDULER_ROUTER_H_
