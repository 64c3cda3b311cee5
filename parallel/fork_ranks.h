// parallel/fork_ranks.h
//
// Runs one function as N forked child processes, one per rank: the local
// launcher of multi-process communicator tests and benchmarks.
//
// Thread safety: call from a single-threaded process (fork copies only the
// calling thread).

#ifndef WEIR_PARALLEL_FORK_RANKS_H_
#define WEIR_PARALLEL_FORK_RANKS_H_

#include <functional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace weir::parallel {

// Forks `world_size` children; child r runs body(r) and exits with its return
// value (without running atexit handlers or destructors of the parent's
// objects). Waits for all children; a child still running after `timeout` is
// killed with SIGKILL. Returns each child's outcome indexed by rank: its exit
// code, or 128 + signal number if a signal ended it (137 = SIGKILL).
// Returns INTERNAL if fork fails (already forked children are killed).
absl::StatusOr<std::vector<int>> ForkRanks(int world_size, const std::function<int(int)>& body,
                                           absl::Duration timeout);

}  // namespace weir::parallel

#endif  // WEIR_PARALLEL_FORK_RANKS_H_
