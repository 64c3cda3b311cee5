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
// this one reads 16 bytes per thread and also takes bf16. Fp8ActBf16 turns
// its output back into bf16 values, exactly.
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

// Fp8ActBf16: ActQuantFp8's output back in bf16, for a product that runs an
// FP8 linear as Bf16Gemm over the dequantized operands (both exact: e4m3
// code x UE8M0 scale is a bf16 value). Optionally several groups of one
// shape in one launch; `out` is always packed.
struct Fp8ActBf16Params {
  const uint8_t* codes = nullptr;   // device [groups][rows, cols] e4m3, 16-byte aligned
  const uint8_t* scales = nullptr;  // device [groups][rows, cols / 32] UE8M0 (ActQuantFp8's)
  uint16_t* out = nullptr;  // device [groups][rows, cols] bf16 bits, packed, 16-byte aligned
  int64_t rows = 0;
  int64_t cols = 0;  // multiple of 32
  int groups = 1;
  int64_t code_group_stride = 0;   // bytes between groups' codes, a multiple of 16; 0: rows x cols
  int64_t scale_group_stride = 0;  // bytes between groups' scales; 0: rows x cols / 32
  // Optional, device, as ActQuantFp8Params::row_count: rows at and past it
  // (clamped to [0, rows]) are neither read nor written (every group's).
  const int64_t* row_count = nullptr;
};

// Returns OK or INVALID_ARGUMENT: a null pointer, rows or cols not positive,
// cols not a multiple of 32, rows x cols above 2^40, groups outside [1,
// 65535], codes or out not 16-byte aligned, a negative group stride, a
// non-zero one below its packed size, or a code group stride not a multiple
// of 16.
absl::Status CheckFp8ActBf16Params(const Fp8ActBf16Params& params);

// Enqueues out = code x 2^(scale - 127) as bf16 bits on `stream`: the value
// cpu::DequantizeFp8 gives, which is a bf16 value for every code and every
// scale ActQuantFp8 picks, so exact (NaN codes or a 0xFF scale give a bf16
// NaN). The bits Bf16Gemm's w_codes path widens the same code and scale to.
// One launch, no allocation, no host synchronization (graph-capturable).
// INVALID_ARGUMENT as CheckFp8ActBf16Params; INTERNAL with the CUDA error if
// the launch fails.
absl::Status Fp8ActBf16(const Fp8ActBf16Params& params, cudaStream_t stream);

}  // namespace weir::kernels::cuda::dense

#endif  // WEIR_KERNELS_CUDA_DENSE_ACT_QUANT_FP8_H_
