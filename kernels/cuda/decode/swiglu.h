// kernels/cuda/decode/swiglu.h
//
// Swiglu: the SwiGLU activation of worker/model/expert_ffn.cc
// SwigluExpertForward (between the w1/w3 and the w2 products) as one
// element-wise kernel. For each element (row r, column i):
//   g = gate[r, i], u = up[r, i];  if round_bf16: g = bf16(g), u = bf16(u)
//   if limit > 0: u = clamp(u, -limit, limit); g = min(g, limit)
//   h = (g / (1 + ExpF(-g))) * u;  out = route_weight ? route_weight[r] * h : h
//   if round_bf16: out = bf16(out)
// with clamp and min as std::clamp / std::min (NaN passes through), ExpF from
// kernels/common/fmath.h, bf16 round-to-nearest-even as
// kernels/common/numeric_formats.h, and every other step one fp32 IEEE
// operation in that order (no fused multiply-add): bit-identical to the CPU
// loop (whose ops.RoundBf16 calls are the round_bf16 steps).
//
// Thread safety: stateless; safe from any thread.

#ifndef WEIR_KERNELS_CUDA_DECODE_SWIGLU_H_
#define WEIR_KERNELS_CUDA_DECODE_SWIGLU_H_

#include <cstdint>

#include "absl/status/status.h"

typedef struct CUstream_st* cudaStream_t;

namespace weir::kernels::cuda::decode {

struct SwigluParams {
  const float* gate = nullptr;          // device [rows, inter]
  const float* up = nullptr;            // device [rows, inter]
  const float* route_weight = nullptr;  // device [rows] or null (no weighting)
  float* out = nullptr;                 // device [rows, inter]; may alias gate or up exactly
  int64_t rows = 0, inter = 0;
  float limit = 0.0f;  // > 0 enables the clamp; 0, negative or NaN disables it
  bool round_bf16 = false;
  // Optional: out's FP8 form in the same launch, the bits ActQuantFp8
  // (kernels/cuda/dense/act_quant_fp8.h) gives of out: e4m3 codes [rows,
  // inter] and UE8M0 scales [rows, inter / 32]; needs inter % 32 == 0 and
  // 8-byte aligned codes. out may then be null (the next product reads the
  // FP8 form only). The shared expert's w2 input, one ActQuantFp8 launch a
  // layer fewer.
  uint8_t* codes = nullptr;
  uint8_t* scales = nullptr;
  // Optional, device: the rows in use, read in the launch (a grouped step's
  // last group offset: rows are laid out for the step's capacity). Rows at
  // and past it (clamped to [0, rows]) are neither read nor written; the
  // rows before it get the same bits. Null: every row.
  const int64_t* row_count = nullptr;
  // Optional, instead of gate and up (both null then): their bf16 bits
  // [rows, inter] (a product's bf16 output, the fp32 sums rounded to nearest
  // even), 16-byte aligned. Only with round_bf16, codes and no out: the
  // activation rounds g and u to bf16 first, so a bf16 input gives the bits
  // of the fp32 value it was rounded from, and the pair reads half the
  // bytes (and the product before it writes half).
  const uint16_t* gate_bf16 = nullptr;
  const uint16_t* up_bf16 = nullptr;
};

// Returns true if Swiglu handles `p`: rows, inter >= 0 and, when rows * inter
// > 0, non-null gate, up and out (or codes and scales: both or neither, with
// inter % 32 == 0 and codes 8-byte aligned); or gate_bf16 and up_bf16 as
// above in place of gate and up.
bool SupportsSwiglu(const SwigluParams& p);

// Enqueues the activation on `stream` (one thread per element). Returns
// INVALID_ARGUMENT when SupportsSwiglu is false; INTERNAL with the CUDA error
// if the launch fails. rows * inter == 0 enqueues nothing.
// REQUIRES: out either equals gate or up, or overlaps neither.
absl::Status Swiglu(const SwigluParams& p, cudaStream_t stream);

}  // namespace weir::kernels::cuda::decode

#endif  // WEIR_KERNELS_CUDA_DECODE_SWIGLU_H_
