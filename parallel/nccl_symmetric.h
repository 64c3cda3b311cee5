// parallel/nccl_symmetric.h
//
// NcclSymmetricMemory: buffers every rank of an NcclCommunicator allocates
// alike and registers as NCCL symmetric windows, plus the device communicator
// (ncclDevComm) through which kernels write into a peer's copy directly and
// meet at LSA barriers (NCCL's device API, 2.28: "load/store accessible" ranks
// are those joined by NVLink or P2P-capable PCIe). A kernel then moves data by
// plain stores (ncclGetLsaPointer(window, offset, peer)) with no NCCL kernel
// and no host in between: what the device decoder's expert-parallel exchange
// uses to send each peer only the rows it needs (kernels/cuda/moe
// moe_exchange_lsa.h).
//
// Create is collective: every rank of the communicator calls it with the same
// sizes in the same order. It needs at least two ranks, all in one LSA team
// (one node, direct P2P between every pair: NCCL 2.28 refuses symmetric
// memory otherwise, a world of one included); otherwise FAILED_PRECONDITION
// before any NCCL call, and the communicator stays usable. A failure of NCCL
// after that point breaks the communicator, as any of its calls does. Errors of NCCL break the
// communicator as any of its calls does (nccl_communicator.h "Failure").
//
// Ownership: the memory must be destroyed before its communicator (the
// destructor deregisters the windows and destroys the device communicator
// through it). Thread safety: not thread-safe, like the communicator.

#ifndef WEIR_PARALLEL_NCCL_SYMMETRIC_H_
#define WEIR_PARALLEL_NCCL_SYMMETRIC_H_

#include <nccl.h>
#include <nccl_device/impl/comm__types.h>

#include <cstddef>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/statusor.h"

namespace weir::parallel {

class NcclCommunicator;

class NcclSymmetricMemory {
 public:
  // One symmetric buffer per entry of `bytes` (each at least 1 byte, rounded
  // up to NCCL's window alignment), zero-filled, and a device communicator
  // with `lsa_barriers` LSA barriers (a kernel's CTA b uses barrier b; 0 for
  // kernels that keep their own). INVALID_ARGUMENT for no buffer, a zero
  // size or lsa_barriers < 0;
  // FAILED_PRECONDITION for a world of one, when some rank is not load/store
  // accessible (ncclTeamLsa smaller than the world) or the communicator is
  // broken;
  // UNAVAILABLE / ABORTED as the communicator's waits.
  static absl::StatusOr<std::unique_ptr<NcclSymmetricMemory>> Create(NcclCommunicator& comm,
                                                                     std::span<const size_t> bytes,
                                                                     int lsa_barriers);

  ~NcclSymmetricMemory();
  NcclSymmetricMemory(const NcclSymmetricMemory&) = delete;
  NcclSymmetricMemory& operator=(const NcclSymmetricMemory&) = delete;

  // Buffer i on this rank (device memory of the communicator's device).
  void* local(int i) const { return buffers_[i].data; }
  // Its window: with ncclGetLsaPointer(window, offset, peer) a kernel reaches
  // peer's buffer i at `offset` bytes.
  ncclWindow_t window(int i) const { return buffers_[i].window; }
  size_t bytes(int i) const { return buffers_[i].bytes; }
  int buffer_count() const { return static_cast<int>(buffers_.size()); }
  // Passed by value to kernels.
  const ncclDevComm& dev_comm() const { return dev_comm_; }
  int lsa_barriers() const { return lsa_barriers_; }

 private:
  struct Buffer {
    void* data = nullptr;
    size_t bytes = 0;
    ncclWindow_t window = nullptr;
  };
  explicit NcclSymmetricMemory(NcclCommunicator& comm) : comm_(comm) {}

  NcclCommunicator& comm_;
  std::vector<Buffer> buffers_;
  ncclDevComm dev_comm_{};
  bool has_dev_comm_ = false;
  int lsa_barriers_ = 0;
};

}  // namespace weir::parallel

#endif  // WEIR_PARALLEL_NCCL_SYMMETRIC_H_
