// kernels/cuda/fill.h
//
// FillF32: writes one value to every element of a device buffer. The smallest
// complete example of the kernel file-group layout (host API, .cuh device
// code, .cu launcher with validation, GPU test) and the proof that
// weir_cuda_library builds sm_90a code on machines without a GPU.
//
// Thread safety: stateless; safe from any thread.

#ifndef WEIR_KERNELS_CUDA_FILL_H_
#define WEIR_KERNELS_CUDA_FILL_H_

#include <cstdint>

#include "absl/status/status.h"

typedef struct CUstream_st* cudaStream_t;

namespace weir::kernels::cuda {

struct FillParams {
  // Device pointer to `n` floats. May be null only when n == 0.
  float* out = nullptr;
  int64_t n = 0;
  float value = 0.0f;
};

// Enqueues the fill on `stream`. INVALID_ARGUMENT for n < 0 or a null `out`
// with n > 0; INTERNAL with the CUDA error string if the launch fails.
absl::Status FillF32(const FillParams& params, cudaStream_t stream);

}  // namespace weir::kernels::cuda

#endif  // WEIR_KERNELS_CUDA_FILL_H_
