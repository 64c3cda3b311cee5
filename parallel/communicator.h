// parallel/communicator.h
//
// Communicator: the collective and point-to-point operations that ranks of one
// group use to move tensors (MoE dispatch/combine, Engram gathers, statistics).
// Implementations: UcxCommunicator (host memory, between processes),
// FakeCommunicator (threads of one process, for tests); a device-memory
// implementation (NCCL) plugs in behind the same interface.
//
// Thread safety: a Communicator is used by one thread at a time (the owning
// rank's step thread). Different ranks' communicators are independent objects.

#ifndef WEIR_PARALLEL_COMMUNICATOR_H_
#define WEIR_PARALLEL_COMMUNICATOR_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "base/strong_id.h"

namespace weir::parallel {

// Element types carried by collectives. Reductions support every type.
enum class DataType { kUint8, kInt32, kInt64, kFloat32, kFloat64 };

// Returns the size in bytes of one element of `dtype`.
size_t DataTypeSize(DataType dtype);
const char* DataTypeName(DataType dtype);

// Element-wise reductions of AllReduce.
enum class ReduceOp { kSum, kMin, kMax };
const char* ReduceOpName(ReduceOp op);

// Where the buffers of one call live. Every buffer of a call has the same kind.
enum class MemoryKind { kHost, kDevice };

// How a call executes. Passed last to every operation.
//
// Host implementations (UcxCommunicator, FakeCommunicator) accept only kHost,
// ignore `stream`, and complete the operation before returning.
// A device implementation accepts kDevice buffers and enqueues the operation
// on `stream` (a cudaStream_t, not owned; null = the default stream); it then
// returns once the work is enqueued, and the buffers must stay valid until the
// stream reaches that point. An implementation returns UNIMPLEMENTED for a
// memory kind it was not built for.
struct ExecContext {
  MemoryKind memory = MemoryKind::kHost;
  void* stream = nullptr;
};

// Arguments of AllToAllV. Counts and offsets are in elements of `dtype`,
// indexed by peer rank (size world_size()). Rank r sends
// send[send_offsets[p], +send_counts[p]) to each peer p (including itself) and
// receives the block that peer p addressed to r into
// recv[recv_offsets[p], +recv_counts[p]).
// REQUIRES (across ranks): recv_counts[p] on rank r == send_counts[r] on p.
// Blocks may be in any order and may leave gaps; recv blocks must not overlap
// each other or the send buffer.
struct AllToAllVArgs {
  const void* send = nullptr;
  std::span<const int64_t> send_counts;   // [world_size]
  std::span<const int64_t> send_offsets;  // [world_size]
  void* recv = nullptr;
  std::span<const int64_t> recv_counts;   // [world_size]
  std::span<const int64_t> recv_offsets;  // [world_size]
  DataType dtype = DataType::kUint8;
};

// One operation of GroupSendRecv.
struct P2POp {
  enum class Kind { kSend, kRecv };
  Kind kind = Kind::kSend;
  Rank peer;             // rank in this communicator; may be this rank
  void* data = nullptr;  // kSend: read only; kRecv: written
  int64_t count = 0;     // elements of dtype
  DataType dtype = DataType::kUint8;
};

// Error contract shared by every operation:
//  * INVALID_ARGUMENT: bad local arguments (sizes, ranks, null buffers with a
//    non-zero count, negative counts), or a peer sent a block whose size differs
//    from the one this rank expected. Nothing was sent for bad local arguments.
//  * UNIMPLEMENTED: the ExecContext memory kind is not supported.
//  * UNAVAILABLE: the operation could not finish within the communicator's
//    timeout, or a peer's connection failed. The message names the ranks that
//    were still outstanding.
//  * ABORTED: the communicator's AbortSignal (parallel/abort_signal.h; an
//    option of the implementations that take one) was raised while or before
//    the operation waited: the group is being torn down.
// After a failure once messages were posted (UNAVAILABLE, ABORTED, or a
// peer's size mismatch) the communicator is broken: ranks may disagree on
// which messages arrived, so every later call returns UNAVAILABLE at once;
// build a new communicator (the failure domain is the whole group).
// Collectives must be called by every rank of the communicator, in the same
// order, with matching arguments (same count, dtype, op, root).
class Communicator {
 public:
  virtual ~Communicator() = default;

  // This rank's index in [0, world_size()).
  virtual Rank rank() const = 0;
  virtual int world_size() const = 0;

  // Exchanges variable-sized blocks between every pair of ranks (see
  // AllToAllVArgs). Used for MoE dispatch and combine.
  virtual absl::Status AllToAllV(const AllToAllVArgs& args, const ExecContext& ctx = {}) = 0;

  // Reduces `count` elements element-wise over all ranks; every rank receives
  // the result in `recv` [count]. `send` may equal `recv` (in place).
  // Host implementations compute each element as
  //   ((x_0 op x_1) op x_2) ... op x_{n-1}   (x_r: rank r's value)
  // so results are bitwise identical on every rank and across runs; a device
  // implementation may use another (documented) order.
  virtual absl::Status AllReduce(const void* send, void* recv, int64_t count, DataType dtype,
                                 ReduceOp op, const ExecContext& ctx = {}) = 0;

  // Gathers `count` elements from every rank: recv [world_size, count], block r
  // is rank r's `send` [count]. `send` may alias block rank() of `recv`.
  virtual absl::Status AllGather(const void* send, void* recv, int64_t count, DataType dtype,
                                 const ExecContext& ctx = {}) = 0;

  // Copies `data` [count] of rank `root` into `data` on every other rank.
  virtual absl::Status Broadcast(void* data, int64_t count, DataType dtype, Rank root,
                                 const ExecContext& ctx = {}) = 0;

  // Returns once every rank has entered Barrier.
  virtual absl::Status Barrier(const ExecContext& ctx = {}) = 0;

  // Posts `ops` together and returns when all have completed, so a rank may
  // send to and receive from the same peers without deadlock. Only the ranks
  // named in `ops` take part. Matching is per ordered pair: the k-th kSend from
  // rank a to rank b (counted over the communicator's lifetime) is received by
  // the k-th kRecv on rank b from rank a; counts must agree. Sends to this
  // rank itself pair with receives from itself in order within the same call
  // (INVALID_ARGUMENT if their numbers or counts differ).
  virtual absl::Status GroupSendRecv(std::span<const P2POp> ops, const ExecContext& ctx = {}) = 0;
};

// Argument checks shared by the implementations (INVALID_ARGUMENT naming
// `name`): a count must be >= 0 and its buffer non-null when it is > 0; a
// per-peer block list must have `world` counts and offsets, offsets >= 0.
absl::Status CheckElementCount(int64_t count, const void* data, const char* name);
absl::Status CheckPeerBlocks(std::span<const int64_t> counts, std::span<const int64_t> offsets,
                             const void* data, int world, const char* name);

// Checks grouped point-to-point `ops` of rank `self` in a world of `world`:
// peers in range, counts, and sends to self paired in order with receives
// from self of the same byte size; the self ops are returned in order.
absl::Status CheckGroupOps(std::span<const P2POp> ops, int self, int world,
                           std::vector<const P2POp*>& self_sends,
                           std::vector<const P2POp*>& self_recvs);

}  // namespace weir::parallel

#endif  // WEIR_PARALLEL_COMMUNICATOR_H_
