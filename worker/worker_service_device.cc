// worker/worker_service_device.cc — the worker's CUDA device setup for
// LoadWeights: which device a rank uses, the one device arena, and the CUDA
// ops' share of it (worker_service_internal.h).

#include <cuda_runtime.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "worker/worker_service_internal.h"

namespace weir::worker::internal {

// The CUDA device of `rank`: rank mod the devices this process sees (NCCL
// needs each rank of a host on a GPU of its own; LoadWeights says so when
// the NCCL communicator cannot be made).
absl::StatusOr<int> CudaDeviceOfRank(int rank) {
  int count = 0;
  if (cudaError_t e = cudaGetDeviceCount(&count); e != cudaSuccess || count == 0) {
    return absl::UnavailableError(absl::StrCat("--backend=cuda but no CUDA device: ",
                                               e == cudaSuccess ? "none found"
                                                                : cudaGetErrorString(e)));
  }
  return rank % count;
}

// The worker's one device allocation: `fraction` of the device, at most what
// is free less a margin for what libraries allocate themselves (the CUDA
// context's growth, NCCL's buffers, cuBLASLt's workspace, staging buffers).
absl::StatusOr<std::shared_ptr<model::DeviceArena>> WorkerArena(int device, double fraction) {
  if (!(fraction > 0 && fraction <= 1)) {
    return absl::InvalidArgumentError("--gpu_memory_fraction must be in (0, 1]");
  }
  if (cudaError_t e = cudaSetDevice(device); e != cudaSuccess) {
    return absl::UnavailableError(absl::StrCat("cudaSetDevice: ", cudaGetErrorString(e)));
  }
  size_t free_bytes = 0, total_bytes = 0;
  if (cudaError_t e = cudaMemGetInfo(&free_bytes, &total_bytes); e != cudaSuccess) {
    return absl::UnavailableError(absl::StrCat("cudaMemGetInfo: ", cudaGetErrorString(e)));
  }
  constexpr size_t kMargin = size_t{512} << 20;
  const double bytes =
      std::min(fraction * static_cast<double>(total_bytes),
               static_cast<double>(free_bytes > kMargin ? free_bytes - kMargin : 0));
  if (bytes < static_cast<double>(size_t{1} << 30)) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "device ", device, " has ", free_bytes, " bytes free; the worker needs at least 1 GiB"));
  }
  return model::DeviceArena::Create(device, static_cast<size_t>(bytes));
}

// The CUDA ops' blocks: the per-call arena and a weight region of `share` of
// the worker's arena (the rest goes to the device decoder).
absl::StatusOr<model::CudaOpsOptions> CudaOpsOptionsFor(std::shared_ptr<model::DeviceArena> memory,
                                                        double share) {
  model::CudaOpsOptions options;
  options.device = memory->device();
  const double mine = share * static_cast<double>(memory->capacity());
  if (mine <= static_cast<double>(options.arena_bytes + (size_t{64} << 20))) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the CUDA ops' share of the device arena (", static_cast<size_t>(mine),
        " bytes) is too small"));
  }
  options.weight_bytes = static_cast<size_t>(mine) - options.arena_bytes;
  options.memory = std::move(memory);
  return options;
}

}  // namespace weir::worker::internal
