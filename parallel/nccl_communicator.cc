// parallel/nccl_communicator.cc

#include "parallel/nccl_communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"

namespace weir::parallel {
namespace {

cudaStream_t Stream(const ExecContext& ctx) { return static_cast<cudaStream_t>(ctx.stream); }

}  // namespace

absl::StatusOr<std::string> NcclCommunicator::MakeUniqueId() {
  ncclUniqueId id;
  const ncclResult_t r = ncclGetUniqueId(&id);
  if (r != ncclSuccess) {
    return absl::UnavailableError(absl::StrCat("ncclGetUniqueId: ", ncclGetErrorString(r)));
  }
  return std::string(id.internal, sizeof(id.internal));
}

absl::StatusOr<std::unique_ptr<NcclCommunicator>> NcclCommunicator::Create(
    Rank rank, int world_size, std::string_view unique_id, const NcclOptions& options) {
  if (world_size < 1 || rank.value() < 0 || rank.value() >= world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", rank.value(), " of world size ", world_size));
  }
  if (unique_id.size() != NCCL_UNIQUE_ID_BYTES) {
    return absl::InvalidArgumentError(absl::StrCat("NCCL unique id has ", unique_id.size(),
                                                   " bytes, want ", NCCL_UNIQUE_ID_BYTES));
  }
  if (options.timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("timeout must be positive");
  }
  int device = options.device.value();
  if (options.device.valid()) {
    if (cudaSetDevice(device) != cudaSuccess) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot use CUDA device ", device, ": ",
                       cudaGetErrorString(cudaGetLastError())));
    }
  } else if (cudaGetDevice(&device) != cudaSuccess) {
    return absl::InvalidArgumentError(
        absl::StrCat("no CUDA device: ", cudaGetErrorString(cudaGetLastError())));
  }
  ncclUniqueId id;
  std::memcpy(id.internal, unique_id.data(), sizeof(id.internal));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = nullptr;
  const ncclResult_t r = ncclCommInitRankConfig(&comm, world_size, id, rank.value(), &config);
  if (comm == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("ncclCommInitRankConfig: ", ncclGetErrorString(r)));
  }
  std::unique_ptr<NcclCommunicator> self(
      new NcclCommunicator(comm, rank.value(), world_size, device, options));
  RETURN_IF_ERROR(self->Await(r, "initialisation")) << "rank " << rank.value() << " of "
                                                    << world_size;
  if (cudaMalloc(&self->barrier_word_, sizeof(int32_t)) != cudaSuccess) {
    return self->Fail(absl::InternalError(
        absl::StrCat("cudaMalloc: ", cudaGetErrorString(cudaGetLastError()))));
  }
  return self;
}

NcclCommunicator::NcclCommunicator(ncclComm_t comm, int rank, int world_size, int device,
                                   const NcclOptions& options)
    : comm_(comm), rank_(rank), world_size_(world_size), device_(device), options_(options) {}

NcclCommunicator::~NcclCommunicator() {
  cudaSetDevice(device_);
  if (comm_ != nullptr && broken_.ok()) {
    // Finalize flushes enqueued work; Await aborts if that does not finish.
    if (Await(ncclCommFinalize(comm_), "finalize").ok()) {
      ncclCommDestroy(comm_);
      comm_ = nullptr;
    }
  }
  if (comm_ != nullptr) ncclCommAbort(comm_);
  if (barrier_word_ != nullptr) cudaFree(barrier_word_);
}

absl::Status NcclCommunicator::Begin(const ExecContext& ctx) {
  if (!broken_.ok()) return broken_;
  if (options_.abort != nullptr && options_.abort->aborted()) {
    return Fail(options_.abort->Check("NCCL call"));
  }
  if (ctx.memory != MemoryKind::kDevice) {
    return absl::UnimplementedError("NcclCommunicator supports device memory only");
  }
  if (cudaSetDevice(device_) != cudaSuccess) {
    return Fail(absl::InternalError(absl::StrCat("cudaSetDevice(", device_, "): ",
                                                 cudaGetErrorString(cudaGetLastError()))));
  }
  return absl::OkStatus();
}

absl::Status NcclCommunicator::Await(int result, const char* what) {
  const absl::Time deadline = absl::Now() + options_.timeout;
  auto r = static_cast<ncclResult_t>(result);
  while (r == ncclInProgress) {
    if (options_.abort != nullptr && options_.abort->aborted()) {
      return Fail(options_.abort->Check(absl::StrCat("NCCL ", what)));
    }
    if (absl::Now() > deadline) {
      return Fail(absl::UnavailableError(absl::StrCat(
          "NCCL ", what, " did not finish within ", absl::FormatDuration(options_.timeout))));
    }
    absl::SleepFor(absl::Microseconds(20));
    if (ncclCommGetAsyncError(comm_, &r) != ncclSuccess) r = ncclInternalError;
  }
  if (r != ncclSuccess) return FailNccl(r, what);
  return absl::OkStatus();
}

absl::Status NcclCommunicator::Fail(absl::Status status) {
  if (comm_ != nullptr) {
    ncclCommAbort(comm_);
    comm_ = nullptr;
  }
  broken_ = absl::UnavailableError(absl::StrCat("communicator broken: ", status.message()));
  return status;
}

absl::Status NcclCommunicator::FailNccl(int result, const char* what) {
  const auto r = static_cast<ncclResult_t>(result);
  std::string message = absl::StrCat("NCCL ", what, ": ", ncclGetErrorString(r));
  if (comm_ != nullptr) {
    const char* last = ncclGetLastError(comm_);
    if (last != nullptr && *last != '\0') absl::StrAppend(&message, " (", last, ")");
  }
  // Peer and network failures are UNAVAILABLE; anything else is a bug here
  // or in the caller's cross-rank usage.
  const bool peer = r == ncclRemoteError || r == ncclSystemError;
  return Fail(peer ? absl::UnavailableError(message) : absl::InternalError(message));
}

absl::Status NcclCommunicator::Copy(void* dst, const void* src, size_t bytes, void* stream,
                                    const char* what) {
  if (bytes == 0 || dst == src) return absl::OkStatus();
  if (cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice,
                      static_cast<cudaStream_t>(stream)) != cudaSuccess) {
    return Fail(absl::InternalError(absl::StrCat(what, " cudaMemcpyAsync: ",
                                                 cudaGetErrorString(cudaGetLastError()))));
  }
  return absl::OkStatus();
}

absl::Status NcclCommunicator::Barrier(const ExecContext& ctx) {
  RETURN_IF_ERROR(Begin(ctx));
  RETURN_IF_ERROR(Await(
      ncclAllReduce(barrier_word_, barrier_word_, 1, ncclInt32, ncclSum, comm_, Stream(ctx)),
      "barrier"));
  return Synchronize(ctx);
}

absl::Status NcclCommunicator::Synchronize(const ExecContext& ctx) {
  RETURN_IF_ERROR(Begin(ctx));
  const absl::Time deadline = absl::Now() + options_.timeout;
  while (true) {
    const cudaError_t e = cudaStreamQuery(Stream(ctx));
    if (e == cudaSuccess) return absl::OkStatus();
    if (e != cudaErrorNotReady) {
      return Fail(absl::InternalError(absl::StrCat("stream error: ", cudaGetErrorString(e))));
    }
    ncclResult_t async = ncclSuccess;
    if (ncclCommGetAsyncError(comm_, &async) != ncclSuccess) async = ncclInternalError;
    if (async != ncclSuccess && async != ncclInProgress) return FailNccl(async, "synchronize");
    if (options_.abort != nullptr && options_.abort->aborted()) {
      return Fail(options_.abort->Check("NCCL synchronize"));
    }
    if (absl::Now() > deadline) {
      return Fail(absl::UnavailableError(absl::StrCat("stream did not drain within ",
                                                      absl::FormatDuration(options_.timeout),
                                                      "; a peer may be dead")));
    }
    absl::SleepFor(absl::Microseconds(20));
  }
}

}  // namespace weir::parallel
