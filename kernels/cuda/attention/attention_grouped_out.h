// kernels/cuda/attention/attention_grouped_out.h
//
// The output an attention launch can write instead of its plain [queries,
// heads, head_dim] one: V4.1's grouped output projection's input, [groups,
// queries, group_width], each head's last rope_dim values rotated back (the
// inverse RoPE at the query's position, then the bf16 boundary when the
// launch rounds), as fp32 or as ToBf16's bits: the bits of decode's SwapAxes
// with its RoPE after the plain output (kernels/cuda/decode/rows.h).
// SparseAttentionParams::grouped (the staged kernel) and
// SparseDecodeAttentionParams::grouped (kWgmma64) take it; each header says
// what its kernel requires of it.
//
// Thread safety: plain data.

#ifndef WEIR_KERNELS_CUDA_ATTENTION_ATTENTION_GROUPED_OUT_H_
#define WEIR_KERNELS_CUDA_ATTENTION_ATTENTION_GROUPED_OUT_H_

#include <cstdint>

namespace weir::kernels::cuda {

struct AttentionGroupedOut {
  float* out = nullptr;          // device [groups, queries, group_width]
  uint16_t* out_bf16 = nullptr;  // device [groups, queries, group_width], bf16 bits
  int64_t group_width = 0;       // 0: off
  const int64_t* positions = nullptr;  // device [queries]
  const float* cos_sin = nullptr;      // device [cos_sin_rows, rope_dim / 2, 2]
  int64_t cos_sin_rows = 0;
  int rope_dim = 0;
};

}  // namespace weir::kernels::cuda

#endif  // WEIR_KERNELS_CUDA_ATTENTION_ATTENTION_GROUPED_OUT_H_
