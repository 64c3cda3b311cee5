// kernels/cuda/moe/mxfp4_grouped_gemm_sm90.h
//
// The routed experts of a MoE layer in the `fast` numerics (shared/GPU.md):
// grouped GEMMs over the local experts with the weights in their stored MXFP4
// form and the activations in stored FP8, on Hopper tensor cores. Rows are
// grouped by expert as MoeGroupRows (moe_permute.h) leaves them: expert e owns
// rows [offsets[e], offsets[e+1]) of x, the offsets live on the device and are
// never read by the host, so one captured CUDA graph serves every routing.
//
//   Mxfp4GroupedGemm:   y = X W_e^T                      (e.g. the down projection w2)
//   Mxfp4GroupedGateUp: h = act_quant(SwiGLU(X w1_e^T, X w3_e^T) * route_weight)
//   Mxfp4ExpertFfn:     both: gate/up into the caller's FP8 scratch, then w2
//
// Operands: X is e4m3 codes [rows, k] + one UE8M0 scale per row and 32 of K
// [rows, k/32] (ActQuantFp8 makes it, dense/act_quant_fp8.h); W_e is e2m1
// codes packed two per byte [n, k/2] (element 2i in the low nibble) + one
// E8M0 scale per row and 32 of K [n, k/32] (kernels/cpu/quant.h MXFP4,
// kernels/cpu/weight_quant.h).
//
// Arithmetic, per output element (identical for every tile, every row count
// and every row position): the e2m1 codes are widened to the e4m3 codes of
// the same values (exact), and then it is Fp8BlockGemm's (fp8_block_gemm_sm90.h):
//   acc = +0
//   for kb = 0, 1, ..., k/32 - 1 (ascending, never split):
//     p   = tensor-core fp32 sum of the 32 products of block kb (m16n8k16 f16
//           mma over its first 16 from zero, then its second 16 onto it)
//     acc = fma(p, e8m0(sw[n, kb]) * e8m0(sx[m, kb]), acc)
//   plain: y = acc, or bf16(acc) as fp32 when round_bf16
// Where every 32-row group of W shares its scales, the bits equal
// Fp8BlockGemm's on the e4m3 form of W (tested). Bound against the exact
// product of the dequantized operands (the test's, Fp8BlockGemm's):
//   |y - exact| <= (1e-5 + (k/32) 2^-24) sum_k |x_k w_k|.
// The gate/up epilogue, per row r and column c, with g, u the two sums above:
//   h = SwigluOut(g, u, route_weight[r])   (expert_ffn.cuh: bf16(g), bf16(u)
//       when round_bf16; u clamped to [-L, L], g to <= L; silu(g) u; times
//       the route weight; bf16 again)
//   then per 32 columns ActQuantFp8's arithmetic (scale 2^ceil(log2(max(amax,
//   1e-4) fl(1/448))), codes e4m3(h / s) nearest even; a block holding NaN or
//   Inf gets scale 0xFF and codes 0x7F), so h is bit-identical to
//   ActQuantFp8(SwigluOut(g, u)) given the same g and u, and is exactly the
//   FP8 input the reference's w2 Linear quantizes its input to.
//
// Batch invariance: a row's outputs depend only on its own X row, its route
// weight and its expert's weights — never on how many rows that or any other
// expert has, nor on its position (no split-K; the pass/tile only moves data).
//
// Decode: the grid is (column tiles, experts); a CTA whose expert has no rows
// returns before reading any weight, so a step reads only the hit experts'
// bytes (the empty CTAs still cost a launch floor, README "Measurements").
// An expert with more than block_m rows is walked in passes of block_m rows
// (its weight tile then comes from L2 again).
//
// Thread safety: stateless; safe from any thread.

#ifndef WEIR_KERNELS_CUDA_MOE_MXFP4_GROUPED_GEMM_SM90_H_
#define WEIR_KERNELS_CUDA_MOE_MXFP4_GROUPED_GEMM_SM90_H_

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/cuda/moe/mxfp4_grouped_gemm_params.h"

typedef struct CUstream_st* cudaStream_t;

namespace weir::kernels::cuda {

// Enqueues the plain grouped GEMM on `stream` (nothing when rows == 0).
// Allocates nothing, never synchronizes (graph-capturable), takes ownership of
// nothing; every pointer must stay valid until the work completes. Device
// data cannot be checked here: REQUIRES offsets as in the params (bad ones are
// clamped, never read or written out of bounds). Returns INVALID_ARGUMENT as
// CheckMxfp4GroupedGemmParams; UNIMPLEMENTED when the device is not compute
// capability 9.x (built for sm_90a only); INTERNAL with the CUDA error if the
// launch fails.
absl::Status Mxfp4GroupedGemm(const Mxfp4GroupedGemmParams& params, cudaStream_t stream);

// Enqueues the fused gate/up product on `stream`; otherwise as Mxfp4GroupedGemm.
absl::Status Mxfp4GroupedGateUp(const Mxfp4GroupedGateUpParams& params, cudaStream_t stream);

// One MoE layer's routed experts: gate/up into `h`/`h_scales`, then w2 into y.
struct Mxfp4ExpertFfnParams {
  const uint8_t* x = nullptr;               // device [rows, dim] e4m3; 16-byte aligned
  const uint8_t* x_scales = nullptr;        // device [rows, dim / 32]; 8-byte aligned
  const int64_t* expert_offsets = nullptr;  // device [num_experts + 1]
  const float* route_weight = nullptr;      // device [rows]; null = 1
  // Device arrays [num_experts] of device pointers, stored form (see top).
  const uint8_t* const* w1 = nullptr;  // [inter, dim / 2]
  const uint8_t* const* w1_scales = nullptr;
  const uint8_t* const* w3 = nullptr;  // [inter, dim / 2]
  const uint8_t* const* w3_scales = nullptr;
  const uint8_t* const* w2 = nullptr;  // [dim, inter / 2]
  const uint8_t* const* w2_scales = nullptr;
  uint8_t* h = nullptr;         // device scratch [rows, inter]; 16-byte aligned
  uint8_t* h_scales = nullptr;  // device scratch [rows, inter / 32]; 8-byte aligned
  float* y = nullptr;           // device [rows, dim]
  int64_t rows = 0;
  int64_t dim = 0;    // multiple of 256
  int64_t inter = 0;  // multiple of 256 (it is the K of w2)
  int num_experts = 0;
  float swiglu_limit = 10.0f;
  bool round_bf16 = true;            // the reference's bf16 boundaries (g, u, h, y)
  int64_t rows_per_expert_hint = 0;  // host estimate; tile choice only
  Mxfp4GroupedTile gate_up_tile = Mxfp4GroupedTile::kAuto;
  Mxfp4GroupedTile down_tile = Mxfp4GroupedTile::kAuto;
  Mxfp4GemmMath math = Mxfp4GemmMath::kMmaF16;  // both products
};

// Bytes of scratch (`h` then `h_scales`, each 16-byte aligned if laid out so).
inline int64_t Mxfp4ExpertFfnScratchBytes(int64_t rows, int64_t inter) {
  return rows * inter + rows * (inter / 32);
}

// Enqueues both launches on `stream`. Errors as the two products (the first
// failing check is returned and nothing is launched).
absl::Status Mxfp4ExpertFfn(const Mxfp4ExpertFfnParams& params, cudaStream_t stream);

}  // namespace weir::kernels::cuda

#endif  // WEIR_KERNELS_CUDA_MOE_MXFP4_GROUPED_GEMM_SM90_H_
