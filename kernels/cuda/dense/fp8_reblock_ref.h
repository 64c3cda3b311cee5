// kernels/cuda/dense/fp8_reblock_ref.h
//
// Re-blocking V4.1's stored FP8 operands for cuBLASLt's block-scaled FP8 GEMM
// (fp8_lt_gemm.h): the CPU specification of ReblockFp8Rows / ReblockFp8Tiles
// (fp8_reblock.h), and the one place where the scale layouts cuBLASLt reads
// are written down (compiled into the kernels too).
//
// A stored code c under UE8M0 scale 2^(s - 127) is rewritten under a larger
// block scale 2^(S - 127), S >= s, as c' = e4m3(c * 2^-(S - s)): the value
// c' * 2^(S - 127) equals c * 2^(s - 127) exactly when c * 2^-(S - s) is an
// e4m3 value (Fp8ReblockIsExact), else it is c * 2^-(S - s) rounded to
// nearest even on e4m3's subnormal grid 2^-9 (off by at most 2^-10 of the
// block scale).
//
// Thread safety: pure functions and plain data.

#ifndef WEIR_KERNELS_CUDA_DENSE_FP8_REBLOCK_REF_H_
#define WEIR_KERNELS_CUDA_DENSE_FP8_REBLOCK_REF_H_

#include <cstdint>
#include <vector>

#if defined(__CUDACC__)
#define WEIR_REBLOCK_HD __host__ __device__
#else
#define WEIR_REBLOCK_HD
#endif

namespace weir::kernels::cuda::dense {

// ---- The scale layouts cuBLASLt reads (one place) --------------------------
//
// Source: the cuBLAS documentation, "128-element 1D and 128x128 2D Block
// Scaling For FP8 Data Types" / "Scaling factors layouts" (CUDA 12.9+), and
// PyTorch's ScaledBlas.cpp (is_blockwise_1x128_scaling: scale [rows, k / 128]
// with strides (1, rows); is_blockwise_128x128_scaling: [ceil(rows / 128),
// k / 128] with row stride round_up(k / 128, 4)). Third-party reading, not
// yet confirmed on a GPU: fp8_lt_gemm_test is what confirms it, and a layout
// it refutes is fixed here alone. The same note says the operand's outer
// dimension (cuBLAS M and N) must be a multiple of 4, hence the padded rows.

// Elements of K under one fp32 block scale.
inline constexpr int kFp8LtScaleBlock = 128;

// Rows an operand of `rows` rows is stored with for cuBLASLt: rows rounded up
// to a multiple of 4 (X's codes, scales and y; W's n is a multiple of 16).
WEIR_REBLOCK_HD constexpr int64_t Fp8LtPaddedRows(int64_t rows) { return (rows + 3) / 4 * 4; }

// VEC128_32F ("1x128"): one fp32 scale per row and 128 of K, outer-dimension
// (row) major: the scale of (row, K block kb) of an operand of `rows` rows.
WEIR_REBLOCK_HD constexpr int64_t Fp8Vec128ScaleIndex(int64_t row, int64_t kb, int64_t rows) {
  return kb * Fp8LtPaddedRows(rows) + row;
}
// Floats of that scale tensor (k a multiple of 128).
WEIR_REBLOCK_HD constexpr int64_t Fp8Vec128ScaleFloats(int64_t rows, int64_t k) {
  return Fp8LtPaddedRows(rows) * (k / kFp8LtScaleBlock);
}

// BLK128x128_32F: one fp32 scale per 128 x 128 block, K-major, each block
// row of scales padded to L4 = round_up(k / 128, 4) floats.
WEIR_REBLOCK_HD constexpr int64_t Fp8Blk128ScaleStride(int64_t k) {
  return (k / kFp8LtScaleBlock + 3) / 4 * 4;
}
// The scale of block (row block nb, K block kb).
WEIR_REBLOCK_HD constexpr int64_t Fp8Blk128ScaleIndex(int64_t nb, int64_t kb, int64_t k) {
  return nb * Fp8Blk128ScaleStride(k) + kb;
}
// Floats of that scale tensor for `rows` rows: ceil(rows / 128) x L4.
WEIR_REBLOCK_HD constexpr int64_t Fp8Blk128ScaleFloats(int64_t rows, int64_t k) {
  return (rows + kFp8LtScaleBlock - 1) / kFp8LtScaleBlock * Fp8Blk128ScaleStride(k);
}

// ---- One code --------------------------------------------------------------

// The e4m3 code of c x 2^-shift, rounded to nearest even (shift >= 0), by
// integer arithmetic on the code's bits: the kernels' form (fp8_reblock.cuh),
// held to Fp8ReblockCode on every code and shift by fp8_reblock_test. NaN
// codes (0x7F, 0xFF) are kept; the sign is kept (a value rounding to zero
// gives the signed zero).
WEIR_REBLOCK_HD constexpr uint32_t Fp8ReblockCodeBits(uint32_t code, uint32_t shift) {
  const uint32_t sign = code & 0x80u, mag = code & 0x7Fu;
  if (mag == 0x7Fu || shift == 0) return code;
  const uint32_t e = mag >> 3;                // biased exponent field; 0: subnormal (or zero)
  if (e > shift) return code - (shift << 3);  // stays normal: the exponent drops
  // Below 2^-6: |c| 2^-shift = x 2^-t 2^-9 with x the 4-bit significand
  // (8 + m for a normal, m for a subnormal) and t >= 1.
  const uint32_t x = e == 0 ? mag : (8u | (mag & 7u));
  const uint32_t t = e == 0 ? shift : shift - e + 1;
  if (t > 4) return sign;  // x < 16 <= 2^(t - 1): below half the step
  const uint32_t q = x >> t, rem = x & ((1u << t) - 1u), half = 1u << (t - 1);
  return sign | (q + ((rem > half || (rem == half && (q & 1u) != 0)) ? 1u : 0u));  // q + 1 <= 8
}

// The specification of the same: e4m3(value(code) x 2^-shift) with
// numeric_formats.h's FloatToE4m3 (nearest even; NaN stays NaN).
// REQUIRES: shift >= 0.
uint8_t Fp8ReblockCode(uint8_t code, int shift);

// True when code x 2^-shift is an e4m3 value, so Fp8ReblockCode keeps the
// value exactly: with |code| = q 2^-9 (q an integer: m for a subnormal,
// (8 + m) 2^(E - 1) for a normal of exponent field E), when q is a multiple
// of 2^shift. In particular when code is a normal 1.mmm 2^e with e - shift >=
// -6 (e4m3's smallest normal exponent), or zero, or NaN (kept).
// REQUIRES: shift >= 0.
bool Fp8ReblockIsExact(uint8_t code, int shift);

// ---- Whole operands --------------------------------------------------------

// Re-blocked codes and fp32 block scales in the kernels' output layout.
struct Fp8Reblocked {
  // [Fp8LtPaddedRows(rows), k] for the rows form (pad rows zero), [n, k] for
  // the tiles form.
  std::vector<uint8_t> codes;
  // Fp8Vec128ScaleFloats / Fp8Blk128ScaleFloats floats; pad rows' scales and
  // the BLK128x128 padding (K blocks k / 128 .. L4 - 1) are 0.
  std::vector<float> scales;
  // Codes whose value was rounded (not Fp8ReblockIsExact): the information
  // the coarser scale lost.
  int64_t inexact = 0;
};

// Rows form (X, or W for the 1x128 weight form): stored e4m3 `codes` [rows,
// k], UE8M0 `scales` with one byte per `rows_per_scale` rows and 32 of K
// ([ceil(rows / rows_per_scale), k / 32]: 1 for X's act_quant blocks, 32 for
// W's 32 x 32 tiles). Each row's 128 span kb gets S = the largest of the
// four scale bytes over it, scale 2^(S - 127) (a NaN float for S = 255) at
// Fp8Vec128ScaleIndex(row, kb, rows), and its codes rewritten under S.
// REQUIRES: rows >= 1, k a positive multiple of 128, rows_per_scale 1 or 32,
// codes.size() == rows k, scales.size() == ceil(rows / rows_per_scale) k / 32.
Fp8Reblocked ReblockFp8RowsRef(const std::vector<uint8_t>& codes,
                               const std::vector<uint8_t>& scales, int64_t rows, int64_t k,
                               int rows_per_scale);

// Tiles form (W for the 128x128 weight form): stored `codes` [n, k] and 32 x
// 32 tile `scales` [ceil(n / 32), k / 32]. Each 128 x 128 block (nb, kb) gets
// S = the largest scale byte of its tiles that exist (rows past n have
// none), scale 2^(S - 127) at Fp8Blk128ScaleIndex(nb, kb, k).
// REQUIRES: n >= 1, k a positive multiple of 128, sizes as stated.
Fp8Reblocked ReblockFp8TilesRef(const std::vector<uint8_t>& codes,
                                const std::vector<uint8_t>& scales, int64_t n, int64_t k);

}  // namespace weir::kernels::cuda::dense

#endif  // WEIR_KERNELS_CUDA_DENSE_FP8_REBLOCK_REF_H_
