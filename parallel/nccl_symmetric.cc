#include "parallel/nccl_symmetric.h"

#include <cuda_runtime.h>
#include <nccl_device/core.h>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "parallel/nccl_communicator.h"

namespace weir::parallel {

absl::StatusOr<std::unique_ptr<NcclSymmetricMemory>> NcclSymmetricMemory::Create(
    NcclCommunicator& comm, std::span<const size_t> bytes, int lsa_barriers) {
  if (bytes.empty() || lsa_barriers < 0) {
    return absl::InvalidArgumentError(absl::StrCat("NcclSymmetricMemory: ", bytes.size(),
                                                   " buffers and ", lsa_barriers,
                                                   " barriers; needs a buffer and barriers >= 0"));
  }
  for (size_t b : bytes) {
    if (b == 0) return absl::InvalidArgumentError("NcclSymmetricMemory: a buffer of 0 bytes");
  }
  if (comm.world_size() < 2) {
    // NCCL 2.28 gives symmetric memory only to a communicator whose ranks
    // are all direct P2P peers, and a world of one has none (measured on an
    // H100: "isAllDirectP2p 0", then ncclDevCommCreate refuses). Refused
    // here, before a failed NCCL call would break the communicator.
    return absl::FailedPreconditionError(
        "NcclSymmetricMemory: a world of one rank has no peers; NCCL gives symmetric memory "
        "only to ranks that are all direct P2P peers");
  }
  if (!comm.broken_.ok() || comm.comm_ == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("NcclSymmetricMemory: ", comm.broken_.message()));
  }
  if (cudaSetDevice(comm.device_) != cudaSuccess) {
    return absl::InternalError(absl::StrCat("NcclSymmetricMemory: device ", comm.device_));
  }
  const ncclTeam_t lsa = ncclTeamLsa(comm.comm_);
  if (lsa.nRanks != comm.world_size()) {
    return absl::FailedPreconditionError(
        absl::StrCat("NcclSymmetricMemory: ", lsa.nRanks, " of the ", comm.world_size(),
                     " ranks are load/store accessible from rank ", comm.rank_,
                     " (device-initiated exchanges need every rank on NVLink or P2P)"));
  }
  std::unique_ptr<NcclSymmetricMemory> m(new NcclSymmetricMemory(comm));
  for (size_t want : bytes) {
    Buffer buf;
    buf.bytes = (want + NCCL_WIN_REQUIRED_ALIGNMENT - 1) / NCCL_WIN_REQUIRED_ALIGNMENT *
                NCCL_WIN_REQUIRED_ALIGNMENT;
    const ncclResult_t r = ncclMemAlloc(&buf.data, buf.bytes);
    if (r != ncclSuccess || buf.data == nullptr) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "NcclSymmetricMemory: ncclMemAlloc of ", buf.bytes, " bytes: ", ncclGetErrorString(r)));
    }
    m->buffers_.push_back(buf);  // freed by the destructor from here on
    if (cudaMemset(buf.data, 0, buf.bytes) != cudaSuccess) {
      return absl::InternalError("NcclSymmetricMemory: clearing a buffer");
    }
    RETURN_IF_ERROR(
        comm.Await(ncclCommWindowRegister(comm.comm_, buf.data, buf.bytes,
                                          &m->buffers_.back().window, NCCL_WIN_COLL_SYMMETRIC),
                   "window registration"));
  }
  ncclDevCommRequirements reqs{};
  reqs.lsaBarrierCount = lsa_barriers;
  RETURN_IF_ERROR(
      comm.Await(ncclDevCommCreate(comm.comm_, &reqs, &m->dev_comm_), "device communicator"));
  m->has_dev_comm_ = true;
  m->lsa_barriers_ = lsa_barriers;
  return m;
}

NcclSymmetricMemory::~NcclSymmetricMemory() {
  // A broken communicator (aborted) has released its resources already.
  const bool live = comm_.comm_ != nullptr && comm_.broken_.ok();
  cudaSetDevice(comm_.device_);
  if (live && has_dev_comm_) {
    comm_.Await(ncclDevCommDestroy(comm_.comm_, &dev_comm_), "device communicator").IgnoreError();
  }
  for (Buffer& b : buffers_) {
    if (live && b.window != nullptr && comm_.comm_ != nullptr) {
      comm_.Await(ncclCommWindowDeregister(comm_.comm_, b.window), "window deregistration")
          .IgnoreError();
    }
    if (b.data != nullptr) ncclMemFree(b.data);
  }
}

}  // namespace weir::parallel
