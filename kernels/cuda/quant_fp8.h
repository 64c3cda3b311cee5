// kernels/cuda/quant_fp8.h
//
// QuantizeFp8: FP8 e4m3 codes with one UE8M0 scale per 32 elements, on the
// GPU, bit-identical to kernels/cpu/quant.h QuantizeFp8 (same amax floor,
// same ceil(log2) read off the fp32 bits, same round-to-nearest-even,
// saturating e4m3 cast, same NaN handling: a block with NaN or Inf gets the
// NaN scale code 0xFF and NaN codes 0x7F).
//
// Thread safety: stateless; safe from any thread.

#ifndef WEIR_KERNELS_CUDA_QUANT_FP8_H_
#define WEIR_KERNELS_CUDA_QUANT_FP8_H_

#include <cstdint>

#include "absl/status/status.h"

typedef struct CUstream_st* cudaStream_t;

namespace weir::kernels::cuda {

struct QuantizeFp8Params {
  const float* x = nullptr;  // device [n]
  uint8_t* codes = nullptr;  // device [n]
  uint8_t* scales = nullptr; // device [n / block]
  int64_t n = 0;
  int block = 32;
};

// True for block == 32, n a positive multiple of 32 and non-null pointers.
bool SupportsQuantizeFp8(const QuantizeFp8Params& params);

// Enqueues the quantization on `stream`. INVALID_ARGUMENT when unsupported;
// INTERNAL with the CUDA error if the launch fails.
absl::Status QuantizeFp8(const QuantizeFp8Params& params, cudaStream_t stream);

}  // namespace weir::kernels::cuda

#endif  // WEIR_KERNELS_CUDA_QUANT_FP8_H_
