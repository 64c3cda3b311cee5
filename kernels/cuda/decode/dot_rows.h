// kernels/cuda/decode/dot_rows.h
//
// DotRows: y[r, j] = sum_k x[r, k] * w[j, k] in fp32 for the `fast` numerics
// (shared/GPU.md): the small fp32 products of a decode step that the
// reference runs one output per thread (the mHC mixes, x [rows, hc * dim] by
// fn [24, hc * dim]; the MoE gate logits; the head), spread over a whole CTA
// per output column.
//
// Arithmetic, per output element (identical for every row count, every row
// position and every grid): K is cut into 128-element chunks; warp w of the
// CTA's 8 takes chunks w, w + 8, w + 16, ...; lane l of it the 4 elements
// 4l .. 4l + 3 of each chunk, accumulated with fma in ascending k; the 32
// lane sums meet in a fixed xor butterfly (16, 8, 4, 2, 1), then the 8 warp
// sums are added in warp order. Nothing depends on the other rows, so a row's
// result is batch-invariant; the order is not the CPU's (results differ from
// the reference by fp32 rounding, |y - exact| <= ~(k / 128 + 12) 2^-24 sum_k
// |x_k w_k|).
//
// Thread safety: stateless; safe from any thread.

#ifndef WEIR_KERNELS_CUDA_DECODE_DOT_ROWS_H_
#define WEIR_KERNELS_CUDA_DECODE_DOT_ROWS_H_

#include <cstdint>

#include "absl/status/status.h"

typedef struct CUstream_st* cudaStream_t;

namespace weir::kernels::cuda::decode {

struct DotRowsParams {
  const float* x = nullptr;  // device [rows, k], 16-byte aligned
  const float* w = nullptr;  // device [out, k], 16-byte aligned
  float* y = nullptr;        // device [rows, out]
  int64_t rows = 0;
  int64_t out = 0;
  int64_t k = 0;  // multiple of 4
};

// True when DotRows takes `p`: 0 <= rows <= 65535 * 32 and 0 <= out <
// 2^31; k > 0 and a multiple of 4; where there is output, non-null x, w, y
// with x and w 16-byte aligned.
bool SupportsDotRows(const DotRowsParams& p);

// Enqueues the product on `stream` (nothing when rows or out is 0). No
// allocation, no synchronization: graph-capturable. INVALID_ARGUMENT when
// SupportsDotRows is false; INTERNAL with the CUDA error if the launch fails.
absl::Status DotRows(const DotRowsParams& p, cudaStream_t stream);

// RowStableDot: the same y in the row-stable order of
// kernels/common/row_stable.h, RowStableMatmul's arithmetic (no FP8
// activation) — bit-identical to it and to the CPU — but with
// one quad of threads per output element rather than a tile per CTA, so a
// product with few outputs and a long k (the mHC mixes: 24 outputs, k = 4 x
// dim) spreads over the GPU. For products whose result must keep the
// reference's bits. Same requirements as DotRows except that k needs no
// alignment and x, w no 16-byte alignment (rows * out < 2^31 * 64 instead).
bool SupportsRowStableDot(const DotRowsParams& p);
absl::Status RowStableDot(const DotRowsParams& p, cudaStream_t stream);

// RowStableDot's staged tiles, for tests and dot_rows_bench: every tile gives
// the same bits. Tile i is (rows, columns) per CTA, K chunk, ring stages:
// 0 (1, 2, 512, 4), 1 (1, 2, 512, 8), 2 (1, 1, 1024, 8), 3 (1, 4, 512, 6),
// 4 (2, 4, 256, 8), 5 (4, 8, 256, 6), 6 (1, 32, 128, 4), 7 (8, 4, 256, 6).
// RowStableDot takes kRowStableDotSmallTile up to 8 rows, the medium tile up
// to 64 and the large one above, when k % 4 == 0 and x, w are 16-byte
// aligned.
inline constexpr int kRowStableDotTiles = 8;
inline constexpr int kRowStableDotSmallTile = 2;
inline constexpr int kRowStableDotMediumTile = 0;
inline constexpr int kRowStableDotLargeTile = 5;
// INVALID_ARGUMENT for a tile outside [0, kRowStableDotTiles) or a product
// the staged kernel cannot take (k % 4 != 0, misaligned x or w).
absl::Status RowStableDotWithTile(const DotRowsParams& p, int tile, cudaStream_t stream);

}  // namespace weir::kernels::cuda::decode

#endif  // WEIR_KERNELS_CUDA_DECODE_DOT_ROWS_H_
