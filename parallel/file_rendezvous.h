// parallel/file_rendezvous.h
//
// Address exchange through a shared directory, for tests and benchmarks that
// start ranks as local processes without a coordinator (in production the
// coordinator distributes the addresses through its Init RPC). Each rank
// writes its bytes to `<dir>/rank.<r>` (atomically, via rename) and reads
// everyone else's.
//
// Thread safety: thread-compatible; no shared state.

#ifndef WEIR_PARALLEL_FILE_RENDEZVOUS_H_
#define WEIR_PARALLEL_FILE_RENDEZVOUS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace weir::parallel {

// Publishes `mine` as rank `rank`'s entry in `dir` and returns the entries of
// all `world_size` ranks, indexed by rank, once every rank has published.
// Returns UNAVAILABLE if some rank has not published within `timeout` (naming
// it), INTERNAL if the directory cannot be written or read.
// REQUIRES: `dir` exists; it holds no entries of an earlier exchange.
absl::StatusOr<std::vector<std::string>> ExchangeThroughDirectory(const std::string& dir, int rank,
                                                                  int world_size,
                                                                  const std::string& mine,
                                                                  absl::Duration timeout);

}  // namespace weir::parallel

#endif  // WEIR_PARALLEL_FILE_RENDEZVOUS_H_
