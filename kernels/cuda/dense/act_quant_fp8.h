// kernels/cuda/dense/act_quant_fp8.h
//
// ActQuantFp8: the reference's act_quant(x, 32, "ue8m0") in stored form on
// the GPU — e4m3 codes [rows, cols] and one UE8M0 scale per row and 32
// columns [rows, cols / 32], the X operand of Fp8BlockGemm
// (fp8_block_gemm_sm90.h). Bit-identical to kernels/cpu/quant.h QuantizeFp8
// over the same fp32 values (bf16 input is widened exactly first): amax floor
// 1e-4, s = 2^ceil(log2(amax * fl(1/448))) read off the fp32 bits, q =
// e4m3(clamp(x / s, +-448)) rounded to nearest even; a block holding NaN or
// +-Inf gets scale 0xFF and codes 0x7F.
//
// kernels/cuda/quant_fp8.h does the same for fp32 with one warp per block;
// this one reads 16 bytes per thread and also takes bf16.
//
// Thread safety: stateless; safe from any thread.

#ifndef WEIR_KERNELS_CUDA_DENSE_ACT_QUANT_FP8_H_
#define WEIR_KERNELS_CUDA_DENSE_ACT_QUANT_FP8_H_

#include <cstdint>

#include "absl/status/status.h"

typedef struct CUstream_st* cudaStream_t;

namespace weir::kernels::cuda::dense {

enum class ActDtype {
  kF32,   // float
  kBf16,  // bf16 bits (uint16_t)
};

struct ActQuantFp8Params {
  const void* x = nullptr;  // device [rows, cols] of `dtype`, 16-byte aligned
  ActDtype dtype = ActDtype::kF32;
  uint8_t* codes = nullptr;   // device [rows, cols], 8-byte aligned
  uint8_t* scales = nullptr;  // device [rows, cols / 32]
  int64_t rows = 0;
  int64_t cols = 0;  // multiple of 32
  // Optional, device: the rows in use, read in the launch (a grouped step's
  // last group offset: rows are laid out for the step's capacity). Rows at
  // and past it (clamped to [0, rows]) are neither read nor written; the
  // rows before it get the same bits. Null: every row.
  const int64_t* row_count = nullptr;
};

// Returns OK or INVALID_ARGUMENT: null pointer, rows or cols not positive,
// cols not a multiple of 32, misaligned x or codes.
absl::Status CheckActQuantFp8Params(const ActQuantFp8Params& params);

// Enqueues the quantization on `stream`. No allocation, no synchronization
// (graph-capturable). INVALID_ARGUMENT as CheckActQuantFp8Params; INTERNAL
// with the CUDA error if the launch fails.
absl::Status ActQuantFp8(const ActQuantFp8Params& params, cudaStream_t stream);

}  // namespace weir::kernels::cuda::dense

#endif  // WEIR_KERNELS_CUDA_DENSE_ACT_QUANT_FP8_H_
