// parallel/collective_checks.h
//
// Conformance checks of the Communicator contract, shared by the tests of
// every implementation (threads through FakeCommunicator, processes through
// UcxCommunicator). Every rank calls the same check with the same arguments;
// the check runs one collective on random data derived from (seed, rank),
// computes every rank's input locally, and compares the result with the
// contract's answer (for AllReduce, bitwise: host reductions run in rank order).
//
// Thread safety: each call uses only `comm` and its own locals.

#ifndef WEIR_PARALLEL_COLLECTIVE_CHECKS_H_
#define WEIR_PARALLEL_COLLECTIVE_CHECKS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "parallel/communicator.h"

namespace weir::parallel {

// Returns the collective's error, or INTERNAL naming the first wrong element.
// `max_count` bounds the random per-peer block size.
absl::Status CheckAllToAllV(Communicator& comm, uint64_t seed, int64_t max_count);
absl::Status CheckAllReduce(Communicator& comm, uint64_t seed, DataType dtype, ReduceOp op,
                            int64_t count, bool in_place);
absl::Status CheckAllGather(Communicator& comm, uint64_t seed, DataType dtype, int64_t count);
absl::Status CheckBroadcast(Communicator& comm, uint64_t seed, Rank root, int64_t count);
// Every rank sends two messages to each of its ring neighbours and one to
// itself in one group; checks contents and order.
absl::Status CheckGroupSendRecv(Communicator& comm, uint64_t seed, int64_t max_count);

// Runs all checks above over a grid of sizes (0, 1, odd, > world size), every
// dtype and op of AllReduce, in place and not, and every broadcast root.
absl::Status CheckEveryCollective(Communicator& comm, uint64_t seed);

}  // namespace weir::parallel

#endif  // WEIR_PARALLEL_COLLECTIVE_CHECKS_H_
