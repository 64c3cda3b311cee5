// parallel/host_staged_communicator.h
//
// HostStagedCommunicator: a host-memory Communicator that moves the data over
// NCCL. Each operation copies the host send buffer into a device staging
// buffer, runs the NCCL operation there, waits for it (NcclCommunicator::
// Synchronize, bounded by NCCL's timeout) and copies the result back. It lets
// code written against host spans (the model's expert-parallel executor and
// Engram gather, whose activations the CUDA ops return to the host) use NCCL
// over NVLink between GPUs, and it is the single-GPU path's world of 1.
//
// The staging buffers are device memory allocated at Create (`staging_bytes`
// for send and for receive); an operation that needs more grows them once
// (cudaMalloc outside any CUDA graph) and keeps the larger size, so a steady
// state allocates nothing.
//
// Errors: the wrapped NcclCommunicator's (UNAVAILABLE and broken after an
// NCCL failure or timeout); INTERNAL on a CUDA copy or allocation failure;
// UNIMPLEMENTED for ExecContext.memory == kDevice (use the NcclCommunicator).
//
// Every operation makes the communicator's device current on the calling
// thread (cudaSetDevice) and leaves it so.
//
// Thread safety: not thread-safe, like the communicator it wraps.

#ifndef WEIR_PARALLEL_HOST_STAGED_COMMUNICATOR_H_
#define WEIR_PARALLEL_HOST_STAGED_COMMUNICATOR_H_

#include <cstdint>
#include <memory>
#include <span>

#include "absl/status/statusor.h"
#include "parallel/communicator.h"
#include "parallel/nccl_communicator.h"

namespace weir::parallel {

struct HostStagedOptions {
  // Initial size of each staging buffer (send, receive) in bytes.
  int64_t staging_bytes = int64_t{64} << 20;
};

class HostStagedCommunicator final : public Communicator {
 public:
  // Takes ownership of `nccl`. INVALID_ARGUMENT for a null communicator or a
  // negative size; INTERNAL if the staging buffers cannot be allocated.
  static absl::StatusOr<std::unique_ptr<HostStagedCommunicator>> Create(
      std::unique_ptr<NcclCommunicator> nccl, const HostStagedOptions& options = {});
  ~HostStagedCommunicator() override;

  Rank rank() const override { return nccl_->rank(); }
  int world_size() const override { return nccl_->world_size(); }

  absl::Status AllToAllV(const AllToAllVArgs& args, const ExecContext& ctx = {}) override;
  absl::Status AllReduce(const void* send, void* recv, int64_t count, DataType dtype,
                         ReduceOp op, const ExecContext& ctx = {}) override;
  absl::Status AllGather(const void* send, void* recv, int64_t count, DataType dtype,
                         const ExecContext& ctx = {}) override;
  absl::Status Broadcast(void* data, int64_t count, DataType dtype, Rank root,
                         const ExecContext& ctx = {}) override;
  absl::Status Barrier(const ExecContext& ctx = {}) override;
  absl::Status GroupSendRecv(std::span<const P2POp> ops, const ExecContext& ctx = {}) override;

  // The wrapped device communicator, for callers whose buffers are already on
  // the device (the device decoder's expert exchange). It shares the NCCL
  // communicator, so its calls and this object's interleave in one order on
  // every rank, from the same thread.
  NcclCommunicator& device() { return *nccl_; }

  // Bytes moved host -> device and device -> host so far.
  int64_t bytes_staged() const { return bytes_staged_; }

 private:
  HostStagedCommunicator(std::unique_ptr<NcclCommunicator> nccl, void* stream);
  // Makes the send / receive buffers at least `send` / `recv` bytes.
  absl::Status Reserve(int64_t send, int64_t recv);
  absl::Status ToDevice(void* dst, const void* src, int64_t bytes);
  absl::Status ToHost(void* dst, const void* src, int64_t bytes);
  absl::Status Wait();
  ExecContext DeviceContext() const { return {.memory = MemoryKind::kDevice, .stream = stream_}; }

  std::unique_ptr<NcclCommunicator> nccl_;
  void* stream_ = nullptr;  // cudaStream_t owned here
  char* send_ = nullptr;
  char* recv_ = nullptr;
  int64_t send_bytes_ = 0;
  int64_t recv_bytes_ = 0;
  int64_t bytes_staged_ = 0;
};

}  // namespace weir::parallel

#endif  // WEIR_PARALLEL_HOST_STAGED_COMMUNICATOR_H_
