// kernels/cuda/launch_status.h
//
// The CUDA status helpers: CudaStatus turns a cudaError_t into an
// absl::Status, LaunchStatus is what every launcher returns after enqueueing
// its kernels. One wording everywhere: INTERNAL "<what>: <CUDA error string>".
//
// Thread safety: cudaGetLastError is per host thread; call LaunchStatus on the
// thread that launched. CudaStatus is pure.

#ifndef WEIR_KERNELS_CUDA_LAUNCH_STATUS_H_
#define WEIR_KERNELS_CUDA_LAUNCH_STATUS_H_

#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace weir::kernels::cuda {

// Returns OK for cudaSuccess, else INTERNAL naming `what` and the CUDA error.
inline absl::Status CudaStatus(cudaError_t err, std::string_view what) {
  if (err == cudaSuccess) return absl::OkStatus();
  std::string message(what);
  message += ": ";
  message += cudaGetErrorString(err);
  return absl::InternalError(message);
}

// Returns OK, or INTERNAL naming the op (`what` + " launch") and the CUDA error
// of the launch (cudaGetLastError, which also clears it).
inline absl::Status LaunchStatus(std::string_view what) {
  return CudaStatus(cudaGetLastError(), std::string(what) + " launch");
}

// Lets `kernel` take `bytes` of dynamic shared memory (past the 48 KiB
// default). A host-side function attribute, legal during stream capture and
// cheap to repeat, so launchers call it before every launch. INTERNAL naming
// `what` on a CUDA error.
template <typename Kernel>
absl::Status AllowSharedBytes(Kernel kernel, int64_t bytes, std::string_view what) {
  return CudaStatus(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(bytes)),
                    std::string(what) + ": shared memory attribute");
}

}  // namespace weir::kernels::cuda

#endif  // WEIR_KERNELS_CUDA_LAUNCH_STATUS_H_
