// kernels/cuda/moe/engram.h
//
// Engram on the GPU: the CUDA backends of kernels/cpu/engram.h EngramLookup
// (FP8 e4m3 row gather with E8M0 scales, blocks of 32) and EngramGate (spec
// §4.7).
//
// EngramLookup: one thread per output element, out = e4m3(code) * 2^(s-127):
//   bit-identical to the CPU. Ids live on the device, so they cannot be
//   checked before the launch: an id outside [0, table_rows) gives a NaN row
//   and is counted in `bad_count` (where the CPU returns INVALID_ARGUMENT).
// EngramGate: one thread block per (token, stream k):
//   dot  = sum_c (X_k[c] * w[k,c]) * key_k[c]       fp32: per-thread strided
//          partial sums, then a fixed block tree (the CPU sums sequentially)
//   dot *= (rsqrt(mean X_k^2 + eps) * rsqrt(mean key_k^2 + eps)) * d^-0.5
//          (sums of squares in double, as the CPU)
//   gate = sigmoid(sign(dot) * sqrt(max(|dot|, 1e-6)));  X_k += gate * value
//   then the optional bf16 rounding of X_k (masked tokens: gate 0, still
//   rounded, as the CPU). The three sums run in the CPU's fmath::LaneSum order
//   (one warp) and the sigmoid is fmath::SigmoidF: bit-identical to the CPU,
//   fp32 and bf16.
//
// Thread safety: stateless; safe from any thread.

#ifndef WEIR_KERNELS_CUDA_MOE_ENGRAM_H_
#define WEIR_KERNELS_CUDA_MOE_ENGRAM_H_

#include <cstdint>

#include "absl/status/status.h"

typedef struct CUstream_st* cudaStream_t;

namespace weir::kernels::cuda {

struct EngramLookupParams {
  const uint8_t* table = nullptr;   // device e4m3 [table_rows, dim]
  const uint8_t* scales = nullptr;  // device E8M0 [table_rows, dim / 32]
  const int64_t* ids = nullptr;     // device [num_ids] rows to read
  float* out = nullptr;             // device out [num_ids, dim]
  int32_t* bad_count = nullptr;     // device [1], optional: += ids out of range
  int64_t table_rows = 0;
  int64_t dim = 0;
  int64_t num_ids = 0;
  // out rounded to bf16 (nearest even) as fp32 in this launch: the bits of a
  // RoundBf16 pass after it (the fast decoder's bf16 boundary of the
  // embeddings). Rows of bad ids stay NaN.
  bool round_bf16 = false;
};

// True for table_rows, num_ids > 0, dim a positive multiple of 32 and
// non-null table/scales/ids/out (bad_count may be null).
bool SupportsEngramLookup(const EngramLookupParams& params);

// Enqueues the gather on `stream`. INVALID_ARGUMENT when unsupported;
// INTERNAL with the CUDA error if the launch fails.
absl::Status EngramLookup(const EngramLookupParams& params, cudaStream_t stream);

struct EngramGateParams {
  float* x = nullptr;                    // device [tokens, n, dim], updated in place
  const float* key = nullptr;            // device [tokens, n, dim]
  const float* value = nullptr;          // device [tokens, dim]
  const float* weight = nullptr;         // device [n, dim] = q_weight * k_weight
  const uint8_t* token_mask = nullptr;   // device [tokens], 0 = no Engram; null = all on
  int64_t tokens = 0;
  int hc_mult = 0;
  int64_t dim = 0;
  float eps = 1e-20f;
  bool round_bf16 = true;                // round the updated streams to bf16
  // Elements from one token's key rows (value row) to the next token's; 0 =
  // packed (n * dim, dim). The fast decoder reads both from its projection's
  // output [tokens, (n + 1) * dim] in place: keys at 0, the value at n * dim,
  // both strides (n + 1) * dim (no copies before this launch).
  int64_t key_token_stride = 0;
  int64_t value_token_stride = 0;
};

// True for tokens, hc_mult, dim > 0 and non-null x/key/value/weight.
bool SupportsEngramGate(const EngramGateParams& params);

// Enqueues the gated update on `stream`. INVALID_ARGUMENT when unsupported;
// INTERNAL with the CUDA error if the launch fails.
absl::Status EngramGate(const EngramGateParams& params, cudaStream_t stream);

}  // namespace weir::kernels::cuda

#endif  // WEIR_KERNELS_CUDA_MOE_ENGRAM_H_
