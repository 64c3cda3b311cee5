// kernels/cuda/moe/expert_ffn.h
//
// The routed experts of one MoE layer as a grouped GEMM on the GPU: the CUDA
// backend of worker/model/expert_ffn.h (SwigluExpertForward) and
// kernels/cpu/moe_expert.h (SwigluExpert), for every expert of the layer in
// one launch per product. Group g (one expert, or one physical slot) owns the
// contiguous token rows [offsets[g], offsets[g+1]) of x:
//   xq     = FP8(x)                       if w13_fp8_activation (e4m3, blocks
//                                         of 32 along dim, UE8M0, as quant.h)
//   g, u   = xq w1[g]^T, xq w3[g]^T        fp32; bf16(g), bf16(u) if round_bf16
//   h      = silu(min(g, L)) * clamp(u, -L, L)   L = swiglu_limit (<= 0: off)
//   hidden = route_weight * h             bf16(hidden) if round_bf16
//   y      = FP8?(hidden) w2[g]^T          bf16(y) if round_bf16
// with silu(g) = g / (1 + exp(-g)) and exp in double rounded to fp32 (glibc's
// expf is correctly rounded but for rare inputs), so only the products differ
// from the CPU: each output sums over K in ascending order with fp32 fma (the
// CPU backend sums in RowStableGemm's lane order, kernels/cpu in sgemm's),
// about 1e-7 relative. The roundings after it (bf16, FP8) turn that into rare
// one-step flips; see expert_ffn_test.cc for the tolerances that follow.
// Every output depends only on its own row (batch-invariant).
//
// Launches: GEMM 1 (w1 and w3 together, SwiGLU in the epilogue) writes
// `hidden`; GEMM 2 (w2) writes y. Tiles of 64 rows x 64 columns never span
// two groups; the activation is quantized while it is loaded (tile K = 32 =
// one FP8 block). Not tuned: CUDA-core fp32, no tensor cores.
//
// Thread safety: stateless; safe from any thread.

#ifndef WEIR_KERNELS_CUDA_MOE_EXPERT_FFN_H_
#define WEIR_KERNELS_CUDA_MOE_EXPERT_FFN_H_

#include <cstdint>

#include "absl/status/status.h"

typedef struct CUstream_st* cudaStream_t;

namespace weir::kernels::cuda {

struct GroupedExpertFfnParams {
  const float* x = nullptr;              // device [rows, dim], grouped by expert
  const int64_t* group_offsets = nullptr;  // device [num_groups + 1], nondecreasing,
                                           // offsets[0] = 0, offsets[num_groups] <= rows
  const float* route_weight = nullptr;   // device [rows]; null = 1 (e.g. shared expert)
  // Device arrays [num_groups] of device pointers (the dequantized fp32 weights,
  // DenseWeight::w). A null pointer of a group with rows makes its y rows NaN.
  const float* const* w1 = nullptr;      // each [inter, dim]
  const float* const* w3 = nullptr;      // each [inter, dim]
  const float* const* w2 = nullptr;      // each [dim, inter]
  float* hidden = nullptr;               // device scratch [rows, inter] (fp32)
  float* y = nullptr;                    // device out [rows, dim]; must not overlap x
  int64_t rows = 0;  // rows of x / y, may be 0; may exceed offsets[num_groups] (an upper
                     // bound such as tokens * topk, so no host read of the offsets is needed)
  int64_t dim = 0;
  int64_t inter = 0;
  int num_groups = 0;
  float swiglu_limit = 10.0f;
  bool w13_fp8_activation = true;  // DenseWeight::fp8_activation of w1 / w3
  bool w2_fp8_activation = true;   // DenseWeight::fp8_activation of w2
  bool round_bf16 = true;          // ActivationPrecision::kBf16
};

// Returns the scratch `hidden` needs, in bytes.
inline int64_t GroupedExpertFfnScratchBytes(int64_t rows, int64_t inter) {
  return rows * inter * static_cast<int64_t>(sizeof(float));
}

// True when the launcher handles `params`: rows >= 0; dim, inter, num_groups
// > 0; dim a multiple of 32 when w13_fp8_activation, inter a multiple of 32
// when w2_fp8_activation; rows / 64 + num_groups < 65535; non-null x,
// group_offsets, w1, w3, w2, hidden and y (route_weight may be null).
bool SupportsGroupedExpertFfn(const GroupedExpertFfnParams& params);

// Enqueues both GEMMs on `stream` (nothing when rows == 0). The offsets are
// device data and are not read here: REQUIRES they satisfy the contract above
// (rows outside every group, e.g. past offsets[num_groups], are left
// untouched; groups are clipped to [0, rows)). INVALID_ARGUMENT when unsupported; INTERNAL with the CUDA error
// if a launch fails.
absl::Status GroupedExpertFfn(const GroupedExpertFfnParams& params, cudaStream_t stream);

}  // namespace weir::kernels::cuda

#endif  // WEIR_KERNELS_CUDA_MOE_EXPERT_FFN_H_
