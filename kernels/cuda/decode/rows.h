// kernels/cuda/decode/rows.h
//
// Row glue of a device-resident decode step: the host loops of the CPU model
// (worker/model/model.cc, worker/model/*.cc) as small kernels. Embedding of
// the hc streams, bf16 rounding, gathered/scattered row copies, an axis swap
// and the mean over the streams. Every result is bit-identical to the CPU
// loop it replaces (copies are bitwise; the arithmetic is the same IEEE
// operations in the same order).
//
// Every launcher validates its host-side parameters (INVALID_ARGUMENT),
// enqueues on `stream`, never synchronizes and never allocates, so it can be
// captured in a CUDA graph; INTERNAL carries the CUDA error if a launch
// fails. Element counts of 0 enqueue nothing (and need no pointers). Device
// data (token ids, row numbers) cannot be checked before launch: what
// out-of-range values do is stated per op.
//
// Thread safety: stateless; safe from any thread.

#ifndef WEIR_KERNELS_CUDA_DECODE_ROWS_H_
#define WEIR_KERNELS_CUDA_DECODE_ROWS_H_

#include <cstdint>

#include "absl/status/status.h"

typedef struct CUstream_st* cudaStream_t;

namespace weir::kernels::cuda::decode {

// ---- EmbedStreams -----------------------------------------------------------

// out[t, k, :] = embed[token_ids[t], :] for k < copies: the hc streams of the
// CPU model's RunBackbone ("the embedding repeated"). Bitwise copies.
struct EmbedStreamsParams {
  const float* embed = nullptr;     // device [vocab, dim]
  // device [tokens]. (Named token_ids, not tokens: the count below is
  // `tokens`, and one struct cannot have two members of the same name.)
  const int64_t* token_ids = nullptr;
  float* out = nullptr;             // device [tokens, copies, dim]
  // Optional device [1]: incremented once per token outside [0, vocab); the
  // rows of such a token become quiet NaN (0x7FC00000). Null: not counted.
  int32_t* bad_count = nullptr;
  int64_t tokens = 0, vocab = 0, dim = 0;
  int copies = 1;
};

// Returns true if EmbedStreams handles `p`: tokens, vocab, dim >= 0, copies
// >= 0, tokens at most 2^31 - 1, and, when tokens * copies * dim > 0,
// non-null token_ids and out, and embed non-null when vocab > 0 (with vocab 0
// every token is out of range). A zero element count enqueues nothing (and
// counts nothing).
bool SupportsEmbedStreams(const EmbedStreamsParams& p);

// Enqueues the gather on `stream`. INVALID_ARGUMENT when SupportsEmbedStreams
// is false; INTERNAL with the CUDA error if the launch fails.
// REQUIRES: `out` does not overlap `embed`.
absl::Status EmbedStreams(const EmbedStreamsParams& p, cudaStream_t stream);

// ---- RoundBf16 --------------------------------------------------------------

// x[i] = bf16(x[i]) in place: round to nearest even, bit-identical to
// kernels/common/numeric_formats.h RoundToBf16 (which worker/model
// CpuOps::RoundBf16 applies when its model runs in bf16): NaN stays NaN with
// the quiet bit set and sign kept, +-Inf stays, finite values beyond the bf16
// range round to +-Inf. The kernel always rounds; whether to call it is the
// caller's (CpuOps rounds only in bf16 mode).
struct RoundBf16Params {
  float* x = nullptr;  // device [n], in/out
  int64_t n = 0;
};

// Returns true if RoundBf16 handles `p`: n >= 0, x non-null when n > 0.
bool SupportsRoundBf16(const RoundBf16Params& p);

// Enqueues the rounding on `stream`. INVALID_ARGUMENT when SupportsRoundBf16
// is false; INTERNAL with the CUDA error if the launch fails.
absl::Status RoundBf16(const RoundBf16Params& p, cudaStream_t stream);

// ---- ToBf16 -----------------------------------------------------------------

// out[i] = the bf16 bits of x[i] rounded as RoundBf16 does (the activation
// operand of the `fast` bf16 products, kernels/cuda/dense/bf16_gemm_sm90.h).
struct ToBf16Params {
  const float* x = nullptr;  // device [n]
  uint16_t* out = nullptr;   // device [n]
  int64_t n = 0;
};
bool SupportsToBf16(const ToBf16Params& p);
absl::Status ToBf16(const ToBf16Params& p, cudaStream_t stream);

// ---- Scale ------------------------------------------------------------------

// x[i] = x[i] * factor in place, one fp32 IEEE multiply (round to nearest
// even), as the CPU's `v *= factor` (e.g. the indexer's head-weight scale in
// worker/model/indexer.cc).
struct ScaleParams {
  float* x = nullptr;  // device [n], in/out
  int64_t n = 0;
  float factor = 1.0f;
  bool round_bf16 = false;  // then RoundBf16's rounding, in the same launch
};

// Returns true if Scale handles `p`: n >= 0, x non-null when n > 0.
bool SupportsScale(const ScaleParams& p);

// Enqueues the scaling on `stream`. INVALID_ARGUMENT when SupportsScale is
// false; INTERNAL with the CUDA error if the launch fails.
absl::Status Scale(const ScaleParams& p, cudaStream_t stream);

// ---- RandomFill / RandomBytes ------------------------------------------------

// Synthetic weights drawn on the device (benchmarks of shapes whose weights
// would not fit the host): x[i] = scale * u, u uniform in [-1, 1) from a
// counter-based hash of (seed, i), rounded to bf16. Deterministic for a seed.
// With `bf16` set instead of `x`, the same values are written as bf16 bits
// (synthetic weights held in bf16).
struct RandomFillParams {
  float* x = nullptr;        // device [n]
  uint16_t* bf16 = nullptr;  // device [n]; exactly one of x, bf16
  int64_t n = 0;
  uint64_t seed = 0;
  float scale = 1.0f;
};
bool SupportsRandomFill(const RandomFillParams& p);
absl::Status RandomFill(const RandomFillParams& p, cudaStream_t stream);

// x[i] = a byte from the same hash (every value equally likely) AND `mask`,
// e.g. the packed e2m1 codes of synthetic MXFP4 weights (mask 0xFF), or e4m3
// codes without NaN (mask 0xBF clears the top exponent bit: |value| < 2).
struct RandomBytesParams {
  uint8_t* x = nullptr;  // device [n]
  int64_t n = 0;
  uint64_t seed = 0;
  uint8_t mask = 0xFF;
};
bool SupportsRandomBytes(const RandomBytesParams& p);
absl::Status RandomBytes(const RandomBytesParams& p, cudaStream_t stream);

// ---- CopyRows ---------------------------------------------------------------

// A gather and/or scatter of rows. For i in [0, rows):
//   s = src_rows ? src_rows[i] : i;   d = dst_rows ? dst_rows[i] : i;
//   d < 0 -> nothing is written for i; otherwise
//   dst[d * dst_stride + c] = s < 0 ? 0 : src[s * src_stride + c]   for c < width.
// Strides are in floats; 0 means `width`. Copies are bitwise (NaN payloads
// kept).
// Out-of-range device row numbers: when src_capacity > 0, s >= src_capacity
// is treated as s < 0 (zeros); when dst_capacity > 0, d >= dst_capacity is
// treated as d < 0 (skipped). With a capacity of 0 the row numbers are
// trusted: REQUIRES every s < rows of src and every d < rows of dst.
struct CopyRowsParams {
  const float* src = nullptr;         // device [src rows, src_stride]
  float* dst = nullptr;               // device [dst rows, dst_stride]
  const int32_t* src_rows = nullptr;  // device [rows] or null (identity)
  const int32_t* dst_rows = nullptr;  // device [rows] or null (identity)
  int64_t rows = 0, width = 0, src_stride = 0, dst_stride = 0;
  int64_t src_capacity = 0;  // rows of src, to bound src_rows; 0 = unchecked
  int64_t dst_capacity = 0;  // rows of dst, to bound dst_rows; 0 = unchecked
};

// Returns true if CopyRows handles `p`: rows, width, strides and capacities
// >= 0, rows at most 2^31 - 1, each non-zero stride >= width, and, when rows
// and width are both > 0, non-null src and dst.
bool SupportsCopyRows(const CopyRowsParams& p);

// Enqueues the copy on `stream`. INVALID_ARGUMENT when SupportsCopyRows is
// false; INTERNAL with the CUDA error if the launch fails. Nothing is enqueued
// when rows or width is 0.
// REQUIRES: src and dst do not overlap; no two i write the same dst row
// (otherwise which copy lands is unspecified).
absl::Status CopyRows(const CopyRowsParams& p, cudaStream_t stream);

// ---- SwapAxes ---------------------------------------------------------------

// dst[j, i, :] = src[i, j, :] for src [a, b, width] and dst [b, a, width].
// Bitwise copies; with `rope_cos_sin`, ApplyRope (kernels/cuda/rope.h) on the
// way, the same bits as ApplyRope on src and then the copy: src row (i, j)
// holds width / rope_head_dim heads of token i, at position rope_positions[i]
// (row of the by-position table rope_cos_sin of rope_cos_sin_rows rows; NaN
// outside it), and each head's last rope_dim values rotate in pairs (inverse:
// by -angle), then round to bf16 when rope_round_bf16. The decoder's inverse
// RoPE of the attention output before its grouped projection. With
// dst_bf16 instead of dst, each value leaves as ToBf16's bits of it (the
// transpose and the ToBf16 after it in one launch; the bf16 product reads it).
struct SwapAxesParams {
  const float* src = nullptr;  // device [a, b, width]
  float* dst = nullptr;        // device [b, a, width]
  uint16_t* dst_bf16 = nullptr;  // device [b, a, width]: bf16 bits, when dst is null
  int64_t a = 0, b = 0, width = 0;
  const int64_t* rope_positions = nullptr;  // device [a]
  const float* rope_cos_sin = nullptr;      // device [rope_cos_sin_rows, rope_dim / 2, 2]
  int64_t rope_cos_sin_rows = 0;
  int rope_head_dim = 0;
  int rope_dim = 0;
  bool rope_inverse = false;
  bool rope_round_bf16 = false;
};

// Returns true if SwapAxes handles `p`: a, b, width >= 0 and non-null src and
// one of dst, dst_bf16 (not both) when a * b * width > 0; with rope_cos_sin
// or dst_bf16, also a * b < 2^31 and width < 2^26; with rope_cos_sin, also
// rope_positions, rope_cos_sin_rows > 0, an even rope_dim in (0,
// rope_head_dim] and width a multiple of rope_head_dim.
bool SupportsSwapAxes(const SwapAxesParams& p);

// Enqueues the transpose on `stream`. INVALID_ARGUMENT when SupportsSwapAxes
// is false; INTERNAL with the CUDA error if the launch fails.
// REQUIRES: src and dst do not overlap.
absl::Status SwapAxes(const SwapAxesParams& p, cudaStream_t stream);

// ---- StreamMean -------------------------------------------------------------

// The mean over the hc streams that builds main_hidden in worker/model/model.cc
// RunBackbone:
//   out[t * out_stride + c] = (((0 + x[t, 0, c]) + x[t, 1, c]) + ...) / float(copies)
// in fp32: one IEEE add per stream, k ascending from +0, then one divide.
// Bit-identical to the CPU loop.
struct StreamMeanParams {
  const float* x = nullptr;  // device [tokens, copies, dim]
  float* out = nullptr;      // device [tokens, out_stride] (first dim floats of each row written)
  int64_t tokens = 0, dim = 0;
  int copies = 1;
  int64_t out_stride = 0;  // floats between out rows; 0 = dim
};

// Returns true if StreamMean handles `p`: tokens, dim >= 0, out_stride 0 or
// >= dim, and, when tokens * dim > 0, copies >= 1 and non-null x and out.
bool SupportsStreamMean(const StreamMeanParams& p);

// Enqueues the mean on `stream`. INVALID_ARGUMENT when SupportsStreamMean is
// false; INTERNAL with the CUDA error if the launch fails.
// REQUIRES: out does not overlap x.
absl::Status StreamMean(const StreamMeanParams& p, cudaStream_t stream);

// ---- MarkovArgmax -----------------------------------------------------------

// One position of DSpark's Markov head (worker/model/dspark.cc), for each
// sequence r < sequences: row = logits + (r * block + step) * vocab,
//   row[t] = row[t] + bias[r * vocab + t]   (one fp32 add each, in place)
// then choice = the first t of the largest row[t] (std::max_element's rule
// on NaN-free rows), written to tokens[r * block + step] and prev[r].
struct MarkovArgmaxParams {
  float* logits = nullptr;      // device [sequences * block, vocab]
  const float* bias = nullptr;  // device [sequences, vocab]
  int64_t* tokens = nullptr;    // device [sequences * block]
  int32_t* prev = nullptr;      // device [sequences]
  int64_t sequences = 0, vocab = 0;
  int block = 1, step = 0;
};

// Returns true if MarkovArgmax handles `p`: sequences >= 0 (< 2^31), 1 <=
// vocab < 2^31, 0 <= step < block, and the pointers when sequences > 0.
bool SupportsMarkovArgmax(const MarkovArgmaxParams& p);

// Enqueues the step on `stream` (a block a sequence). INVALID_ARGUMENT when
// SupportsMarkovArgmax is false; INTERNAL with the CUDA error if the launch
// fails. REQUIRES: bias does not overlap logits.
absl::Status MarkovArgmax(const MarkovArgmaxParams& p, cudaStream_t stream);

}  // namespace weir::kernels::cuda::decode

#endif  // WEIR_KERNELS_CUDA_DECODE_ROWS_H_
