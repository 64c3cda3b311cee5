// kernels/cpu/grouped_output.h
//
// First half of DeepSeek-V4.1's grouped low-rank attention output (spec §4.3
// step 8): the attention output o [tokens, heads*head_dim] is viewed as
// `groups` slices of width heads*head_dim/groups, and slice g is projected by
// its own block of wo_a:
//   u[t, g*R + r] = sum_c A_g[r, c] * o[t, g*W + c]     A_g = wo_a rows [g*R, (g+1)*R)
// wo_a is [groups*R, W] (bf16 after the official conversion, or fp32). No
// activation quantization (the reference runs this einsum in bf16). The
// second half, wo_b (FP8), is a plain cpu::Linear on u.
//
// Thread safety: pure function over caller-owned memory.

#ifndef WEIR_KERNELS_CPU_GROUPED_OUTPUT_H_
#define WEIR_KERNELS_CPU_GROUPED_OUTPUT_H_

#include <cstdint>
#include <span>

#include "absl/status/status.h"
#include "kernels/cpu/linear.h"

namespace weir::kernels::cpu {

struct GroupedOutputArgs {
  std::span<const float> o;  // [tokens, groups * W]
  std::span<float> u;        // [tokens, groups * R]
  int64_t tokens = 0;
  int groups = 0;
};

// Computes args.u from `wo_a` ([groups*R, W], kF32 or kBf16). Returns
// INVALID_ARGUMENT if groups does not divide wo_a's rows, the format is
// quantized, or spans are mis-sized.
absl::Status GroupedOutput(const LinearWeight& wo_a, const GroupedOutputArgs& args);

}  // namespace weir::kernels::cpu

#endif  // WEIR_KERNELS_CPU_GROUPED_OUTPUT_H_
