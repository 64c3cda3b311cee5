// kernels/cuda/launch_status.h
//
// LaunchStatus: what every launcher returns after enqueueing its kernels —
// OK, or INTERNAL naming the op and the CUDA error of the launch
// (cudaGetLastError, which also clears it).
//
// Thread safety: cudaGetLastError is per host thread; call it on the thread
// that launched.

#ifndef WEIR_KERNELS_CUDA_LAUNCH_STATUS_H_
#define WEIR_KERNELS_CUDA_LAUNCH_STATUS_H_

#include <cuda_runtime.h>

#include <string>

#include "absl/status/status.h"

namespace weir::kernels::cuda {

inline absl::Status LaunchStatus(const char* what) {
  if (cudaError_t err = cudaGetLastError(); err != cudaSuccess) {
    return absl::InternalError(std::string(what) + " launch: " + cudaGetErrorString(err));
  }
  return absl::OkStatus();
}

}  // namespace weir::kernels::cuda

#endif  // WEIR_KERNELS_CUDA_LAUNCH_STATUS_H_
