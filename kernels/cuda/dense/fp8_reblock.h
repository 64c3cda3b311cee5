// kernels/cuda/dense/fp8_reblock.h
//
// ReblockFp8Rows / ReblockFp8Tiles: V4.1's stored FP8 operands (e4m3 codes
// under UE8M0 scales per 32 of K) rewritten under cuBLASLt's coarser fp32
// block scales, for Fp8LtGemm (fp8_lt_gemm.h): X and W in the 1x128 form
// (VEC128_32F) and W in the 128x128 form (BLK128x128_32F). Each block's
// scale is the largest of the stored scales it covers; each code is
// rewritten exactly where it can be and rounded to nearest even on e4m3's
// subnormal grid where it cannot (fp8_reblock_ref.h, the specification these
// kernels give bit for bit; the layouts are written there).
//
// Memory-bound: each thread moves 16 codes (one 16-byte load and store),
// a CTA one 128-wide span of 32 rows (rows form) or one 128 x 128 block.
//
// Thread safety: stateless; safe from any thread.

#ifndef WEIR_KERNELS_CUDA_DENSE_FP8_REBLOCK_H_
#define WEIR_KERNELS_CUDA_DENSE_FP8_REBLOCK_H_

#include <cstdint>

#include "absl/status/status.h"

typedef struct CUstream_st* cudaStream_t;

namespace weir::kernels::cuda::dense {

// The rows form: one fp32 scale per row and 128 of K (X; W's 1x128 form).
struct ReblockFp8RowsParams {
  const uint8_t* codes = nullptr;   // device [rows, k] e4m3, 16-byte aligned
  const uint8_t* scales = nullptr;  // device [ceil(rows / rows_per_scale), k / 32] UE8M0
  // Device [Fp8LtPaddedRows(rows), k] e4m3, 16-byte aligned; may be `codes`
  // itself when that holds the padded rows (each thread rewrites its own 16
  // bytes). Pad rows (rows .. padded - 1) are written with zeros.
  uint8_t* out_codes = nullptr;
  // Device Fp8Vec128ScaleFloats(rows, k) floats, 16-byte aligned, in the
  // VEC128 layout (Fp8Vec128ScaleIndex); pad rows' scales are written 0.
  float* out_scales = nullptr;
  int64_t rows = 0;
  int64_t k = 0;  // a positive multiple of 128
  // Rows sharing one stored scale byte: 1 for X (act_quant's [rows, k / 32]),
  // 32 for W (its 32 x 32 tiles, [ceil(rows / 32), k / 32]).
  int rows_per_scale = 1;
};

// Returns OK or INVALID_ARGUMENT naming the field: a null pointer; rows < 1;
// k not a positive multiple of 128 or above 128 x 65535; rows x k above
// 2^40; rows_per_scale not 1 or 32; codes, out_codes or out_scales not
// 16-byte aligned.
absl::Status CheckReblockFp8RowsParams(const ReblockFp8RowsParams& params);

// Enqueues the rewrite on `stream`: one launch, no allocation, no host
// synchronization (graph-capturable). INVALID_ARGUMENT as
// CheckReblockFp8RowsParams; INTERNAL with the CUDA error if the launch fails.
absl::Status ReblockFp8Rows(const ReblockFp8RowsParams& params, cudaStream_t stream);

// The tiles form: one fp32 scale per 128 x 128 block of W (BLK128x128).
struct ReblockFp8TilesParams {
  const uint8_t* codes = nullptr;   // device [n, k] e4m3, 16-byte aligned
  const uint8_t* scales = nullptr;  // device [ceil(n / 32), k / 32] UE8M0 (32 x 32 tiles)
  // Device [n, k] e4m3, 16-byte aligned; may be `codes` (in place).
  uint8_t* out_codes = nullptr;
  // Device Fp8Blk128ScaleFloats(n, k) floats, 16-byte aligned, in the
  // BLK128x128 layout (Fp8Blk128ScaleIndex); the padding of each block row
  // (K blocks k / 128 .. L4 - 1) is written 0.
  float* out_scales = nullptr;
  int64_t n = 0;  // >= 1; the last 128-row block may be partial (only its tiles count)
  int64_t k = 0;  // a positive multiple of 128
};

// Returns OK or INVALID_ARGUMENT naming the field: a null pointer; n < 1; k
// not a positive multiple of 128 or above 128 x 65535; n x k above 2^40;
// codes, out_codes or out_scales not 16-byte aligned.
absl::Status CheckReblockFp8TilesParams(const ReblockFp8TilesParams& params);

// Enqueues the rewrite on `stream` (one launch, graph-capturable, as above).
// INVALID_ARGUMENT as CheckReblockFp8TilesParams; INTERNAL on a failed launch.
absl::Status ReblockFp8Tiles(const ReblockFp8TilesParams& params, cudaStream_t stream);

// A product's rows of one role copied out of a scratch it was computed into
// (the prompt rows of a step that mixes roles: cuBLASLt writes every row,
// the step's generated rows keep their own maths'): dst[r, c] = src[r, c]
// for r < rows with row_role[r] == role, c < cols; other rows untouched.
struct CopyRowsOfRoleParams {
  const void* src = nullptr;          // device [rows, src_ld] elements, 16-byte aligned
  void* dst = nullptr;                // device [rows, dst_ld] elements, 16-byte aligned
  const int32_t* row_role = nullptr;  // device [rows]
  int64_t rows = 0;                   // >= 1
  int64_t cols = 0;                   // >= 1; cols x elem_bytes a multiple of 16
  int64_t src_ld = 0;                 // >= cols; src_ld x elem_bytes a multiple of 16
  int64_t dst_ld = 0;                 // >= cols; dst_ld x elem_bytes a multiple of 16
  int elem_bytes = 4;                 // 2 or 4
  int32_t role = 1;
};

// Returns OK or INVALID_ARGUMENT naming the field.
absl::Status CheckCopyRowsOfRoleParams(const CopyRowsOfRoleParams& params);

// Enqueues the copy on `stream` (one launch, 16 bytes a thread,
// graph-capturable). INVALID_ARGUMENT as CheckCopyRowsOfRoleParams;
// INTERNAL on a failed launch.
absl::Status CopyRowsOfRole(const CopyRowsOfRoleParams& params, cudaStream_t stream);

}  // namespace weir::kernels::cuda::dense

#endif  // WEIR_KERNELS_CUDA_DENSE_FP8_REBLOCK_H_
