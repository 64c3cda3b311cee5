// coordinator/scheduler/router.cc

#include "coordinator/scheduler/router.h"

#include <cstdint>

namespace weir::coordinator::scheduler {
namespace {

// True if rank `a` is less loaded than `b` (ties broken by the caller's
// scan order, lowest rank first). Fractions are compared exactly by
// cross-multiplication.
bool LessLoaded(const RankLoad& a, const RankLoad& b) {
  const __int128 ka = static_cast<__int128>(a.num_used_blocks + a.num_waiting_blocks) *
                      (b.num_blocks > 0 ? b.num_blocks : 1);
  const __int128 kb = static_cast<__int128>(b.num_used_blocks + b.num_waiting_blocks) *
                      (a.num_blocks > 0 ? a.num_blocks : 1);
  if (ka != kb) return ka < kb;
  return a.num_waiting + a.num_prefilling + a.num_running <
         b.num_waiting + b.num_prefilling + b.num_running;
}

}  // namespace

absl::StatusOr<Rank> LeastLoadedRouter::Route(const SeqRequest& request,
                                              absl::Span<const RankLoad> loads) {
  if (loads.empty()) return absl::InvalidArgumentError("no ranks to route to");
  size_t best = 0;
  for (size_t r = 1; r < loads.size(); ++r) {
    if (LessLoaded(loads[r], loads[best])) best = r;
  }
  return Rank(static_cast<int32_t>(best));
}

}  // namespace weir::coordinator::scheduler
