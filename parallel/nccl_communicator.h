// parallel/nccl_communicator.h
//
// NcclCommunicator: the device-memory Communicator over NCCL. Every operation
// is enqueued on the CUDA stream of its ExecContext and returns once enqueued;
// Barrier and Synchronize() additionally wait for the stream, bounded by the
// timeout.
//
// Set-up mirrors the UCX address table: one process makes a unique id
// (MakeUniqueId), the coordinator sends the same bytes to every rank
// (InitRequest.nccl_unique_id), and every rank calls Create with them.
//
// Failure: the NCCL communicator is non-blocking (ncclConfig_t.blocking = 0).
// Every wait (initialisation, enqueue, Synchronize, Barrier) polls
// ncclCommGetAsyncError; an NCCL error or a wait that passes the timeout
// aborts the NCCL communicator (ncclCommAbort, which also stops its kernels
// still running on the device) and returns UNAVAILABLE; from then on every
// call returns UNAVAILABLE at once (the Communicator contract's "broken").
// A dead peer is therefore noticed by the next Barrier or Synchronize, never
// by a hang. With NcclOptions::abort every wait also polls that signal: once
// it is raised (from any thread) the waiting call aborts the NCCL
// communicator the same way and returns ABORTED, so a rank stuck in a
// collective with a stopped peer gives up at once. Do not wait on the stream with cudaStreamSynchronize while a
// peer may be dead: that wait has no timeout; use Synchronize().
//
// Differences from the host implementations:
//  * AllReduce uses NCCL's reduction order (ring/tree), which depends on the
//    world size and NCCL's tuning: sums of floats are not bitwise equal to the
//    host order ((x0 op x1) op x2 ...) though they are equal on every rank.
//  * A peer's block-size mismatch is not detected (NCCL does not report it);
//    matching counts remain a precondition across ranks.
//  * Every buffer must be device memory of the communicator's device (or
//    memory the device can address); host memory (ExecContext.memory ==
//    kHost) returns UNIMPLEMENTED.
//
// Example (rank r of n, id from the coordinator):
//   ASSIGN_OR_RETURN(auto comm, NcclCommunicator::Create(Rank(r), n, id, {}));
//   RETURN_IF_ERROR(comm->AllToAllV(args, {.memory = MemoryKind::kDevice,
//                                          .stream = stream}));
//   RETURN_IF_ERROR(comm->Synchronize({.memory = MemoryKind::kDevice, .stream = stream}));
//
// Thread safety: not thread-safe; one thread uses a communicator at a time.
// Every call makes the communicator's device the calling thread's current
// CUDA device (cudaSetDevice) and leaves it so.

#ifndef WEIR_PARALLEL_NCCL_COMMUNICATOR_H_
#define WEIR_PARALLEL_NCCL_COMMUNICATOR_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "base/strong_id.h"
#include "parallel/abort_signal.h"
#include "parallel/communicator.h"

typedef struct ncclComm* ncclComm_t;

namespace weir::parallel {

struct NcclOptions {
  // Longest wait of one call: initialisation, enqueueing, Synchronize, Barrier.
  absl::Duration timeout = absl::Seconds(30);
  // CUDA device of this rank; invalid (the default) = the calling thread's
  // current device at Create.
  DeviceOrdinal device;
  // Polled by every wait (see "Failure" above); null = never aborted. Not
  // owned; must outlive the communicator.
  const AbortSignal* abort = nullptr;
};

class NcclCommunicator final : public Communicator {
 public:
  // Returns a fresh NCCL unique id (NCCL_UNIQUE_ID_BYTES = 128 bytes). NCCL
  // starts its bootstrap root in the calling process: that process must stay
  // alive until every rank's Create has returned. UNAVAILABLE if NCCL fails
  // (e.g. no usable network interface for the bootstrap).
  static absl::StatusOr<std::string> MakeUniqueId();

  // Joins rank `rank` of `world_size` ranks that share `unique_id` (from
  // MakeUniqueId). Collective: returns once every rank has joined.
  // INVALID_ARGUMENT: world_size < 1, rank outside [0, world_size),
  // unique_id not 128 bytes, timeout <= 0, or the device does not exist.
  // UNAVAILABLE: NCCL failed or some rank did not join within the timeout
  // (the partial NCCL communicator is aborted); ABORTED if options.abort is
  // raised first.
  static absl::StatusOr<std::unique_ptr<NcclCommunicator>> Create(Rank rank, int world_size,
                                                                  std::string_view unique_id,
                                                                  const NcclOptions& options);

  // Finalises and destroys the NCCL communicator (waiting at most one
  // timeout for work still enqueued, then aborting), or aborts it if broken.
  ~NcclCommunicator() override;

  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  Rank rank() const override { return Rank(rank_); }
  int world_size() const override { return world_size_; }
  DeviceOrdinal device() const { return DeviceOrdinal(device_); }

  // Communicator operations (contract in communicator.h). Enqueued on
  // ctx.stream (a cudaStream_t of this device; null = the legacy default
  // stream); they return before the data moves. Self blocks (AllToAllV,
  // GroupSendRecv to this rank) are cudaMemcpyAsync on the same stream.
  // REQUIRES: ctx.memory == kDevice (else UNIMPLEMENTED, after argument checks).
  absl::Status AllToAllV(const AllToAllVArgs& args, const ExecContext& ctx) override;
  absl::Status AllReduce(const void* send, void* recv, int64_t count, DataType dtype, ReduceOp op,
                         const ExecContext& ctx) override;
  absl::Status AllGather(const void* send, void* recv, int64_t count, DataType dtype,
                         const ExecContext& ctx) override;
  absl::Status Broadcast(void* data, int64_t count, DataType dtype, Rank root,
                         const ExecContext& ctx) override;
  // Enqueues a one-element all-reduce on ctx.stream and waits for the stream
  // (so it also waits for all earlier work on that stream).
  absl::Status Barrier(const ExecContext& ctx) override;
  absl::Status GroupSendRecv(std::span<const P2POp> ops, const ExecContext& ctx) override;

  // Waits until ctx.stream has finished everything enqueued so far, polling
  // NCCL for asynchronous errors. UNAVAILABLE (and broken) on an NCCL error
  // or after the timeout; INTERNAL (and broken) on a CUDA error of the stream.
  absl::Status Synchronize(const ExecContext& ctx);

 private:
  friend class NcclSymmetricMemory;  // registers windows through comm_, waits by Await

  NcclCommunicator(ncclComm_t comm, int rank, int world_size, int device,
                   const NcclOptions& options);

  // Returns broken_, UNIMPLEMENTED for host memory, or sets the device.
  absl::Status Begin(const ExecContext& ctx);
  // Waits while NCCL reports ncclInProgress for `result`, bounded by the
  // timeout; fails (aborting) on any other error.
  absl::Status Await(int result, const char* what);
  // Aborts the NCCL communicator and records `status` as broken_.
  absl::Status Fail(absl::Status status);
  // Fail() with the NCCL error string and last error message of `result`.
  absl::Status FailNccl(int result, const char* what);
  absl::Status Copy(void* dst, const void* src, size_t bytes, void* stream, const char* what);

  ncclComm_t comm_ = nullptr;  // null after abort
  const int rank_;
  const int world_size_;
  const int device_;
  const NcclOptions options_;
  int32_t* barrier_word_ = nullptr;  // [1] device memory for Barrier
  absl::Status broken_;
};

}  // namespace weir::parallel

#endif  // WEIR_PARALLEL_NCCL_COMMUNICATOR_H_
