// kernels/cuda/dense/grouped_row_stable_matmul.h
//
// RowStableGroupedMatmul: for groups g = 0 .. num_groups - 1, the rows
// [offsets[g], offsets[g + 1]) of y [rows, out] = act(x rows) * w[g]^T, each
// output element computed with exactly the operations of RowStableMatmul
// (the row-stable order of kernels/common/row_stable.h). A group's rows are
// therefore bit-identical to RowStableMatmul of those rows alone against
// w[g], and to the CPU's per-expert RowStableGemm: this is the MoE expert
// product of a device-resident decode step (rows sorted by expert).
//
// Group sizes live on the device (written by an earlier kernel of the same
// stream or graph), so nothing of the launch depends on them: the grid is
// (ceil(R / kBm), ceil(out / kBn), num_groups) with R = rows, or
// min(rows, max_group_rows) when that hint is set; block x walks its group's
// row tiles x, x + gridDim.x, ... and returns at once when there are none.
// `rows` is an upper bound on the rows in use (e.g. tokens * topk); rows at or
// past offsets[num_groups] are not written. The launcher neither allocates nor synchronizes, so it may be
// captured into a CUDA graph.
//
// Weights come in one of two forms: fp32 (`w`) or MXFP4 (`w_mxfp4` +
// `w_mxfp4_scales`, the stored form of the routed experts, 8x smaller), which
// the kernel dequantizes element by element as it loads a weight tile, to
// exactly the fp32 value of cpu::DequantizeMxfp4Weight. The arithmetic that
// follows is the same, so the MXFP4 product is bit-identical to the fp32
// product over the dequantized weights (NaN where a block's scale is 0xFF,
// +-Inf where scales 0xFD and 0xFE overflow, as the dequantized weights hold).
//
// Device-side contract (not checkable on the host): offsets nondecreasing,
// offsets[0] = 0, offsets[num_groups] <= rows; every w[g] of a non-empty
// group points to [out, in] floats (MXFP4: w_mxfp4[g] to [out, in / 2] bytes
// and w_mxfp4_scales[g] to [out, in / 32] bytes; the codes 4-byte aligned, as they
// are read a word at a time) that do not overlap y. The
// kernel does not read or write out of bounds when the offsets break it: each
// offset is clamped into [0, rows] and a group whose end is below its start is
// empty. A group with rows and a null w[g] (MXFP4: a null w_mxfp4[g] or
// w_mxfp4_scales[g]) gets NaN in all of its rows.
//
// Thread safety: stateless; safe from any thread.

#ifndef WEIR_KERNELS_CUDA_DENSE_GROUPED_ROW_STABLE_MATMUL_H_
#define WEIR_KERNELS_CUDA_DENSE_GROUPED_ROW_STABLE_MATMUL_H_

#include <cstdint>

#include "absl/status/status.h"

typedef struct CUstream_st* cudaStream_t;

namespace weir::kernels::cuda::dense {

struct GroupedMatmulParams {
  // device [rows, in]; group g owns rows [offsets[g], offsets[g + 1]).
  const float* x = nullptr;
  // device [num_groups + 1], nondecreasing, offsets[0] = 0.
  const int64_t* group_offsets = nullptr;
  // device array [num_groups] of device pointers, each [out, in]; null when
  // the MXFP4 weights below are given.
  const float* const* w = nullptr;
  float* y = nullptr;  // device [rows, out]; must not overlap x or act_scratch
  // An upper bound (e.g. tokens * topk): rows at or past offsets[num_groups]
  // are untouched.
  int64_t rows = 0;
  int64_t out = 0, in = 0;
  int num_groups = 0;
  // FakeQuant kFp8 of x (blocks of 32 along in) first, as RowStableMatmul;
  // the whole [rows, in] is quantized, used or not.
  bool fp8_activation = false;
  float* act_scratch = nullptr;  // device [rows, in] when fp8_activation; must not overlap x
  // Optional launch-shape hint: a bound on any one group's rows known on the
  // host (e.g. the token count when each token picks an expert at most once);
  // 0 means rows. It sizes the grid only: a larger group is still computed in
  // full (blocks loop over its row tiles), and no value depends on it.
  int64_t max_group_rows = 0;
  // MXFP4 weights instead of `w` (which must then be null): device arrays
  // [num_groups] of device pointers to packed e2m1 codes [out, in/2] (element
  // 2k in the low nibble) and E8M0 scales [out, in/32]. Each weight is
  // dequantized on load to exactly the value cpu::DequantizeMxfp4Weight gives
  // (e2m1 * 2^(e-127), with e = 0 the fp32 subnormal 2^-127, e = 0xFF NaN, and
  // the product rounded to fp32, which overflows to +-Inf only at e >= 0xFD),
  // so y is bit-identical to the fp32 path with
  // w[g] = DequantizeMxfp4Weight(codes[g], scales[g]). REQUIRES in % 32 == 0.
  const uint8_t* const* w_mxfp4 = nullptr;
  const uint8_t* const* w_mxfp4_scales = nullptr;
};

// Returns true when RowStableGroupedMatmul accepts `params`: rows, out and in
// positive and below 2^31; num_groups in [1, 65535]; out <= 65535 * 32;
// max_group_rows >= 0; non-null x, group_offsets and y; exactly one weight
// form: w non-null and both MXFP4 arrays null, or w null and both MXFP4
// arrays non-null with in a multiple of 32; with fp8_activation, in a
// multiple of 32 and a non-null act_scratch; y, x and act_scratch pairwise
// disjoint. Pointers are not dereferenced.
bool SupportsRowStableGroupedMatmul(const GroupedMatmulParams& params);

// Enqueues, on `stream`: with fp8_activation, FakeQuant kFp8 of x into
// act_scratch; then every group's product as above. The tile shape is chosen
// on the host from the mean group size ceil(rows / num_groups) (capped by
// max_group_rows); every shape gives the same bits. No allocation, no synchronization.
// INVALID_ARGUMENT when !SupportsRowStableGroupedMatmul; INTERNAL with the
// CUDA error string if a launch fails.
absl::Status RowStableGroupedMatmul(const GroupedMatmulParams& params, cudaStream_t stream);

}  // namespace weir::kernels::cuda::dense

#endif  // WEIR_KERNELS_CUDA_DENSE_GROUPED_ROW_STABLE_MATMUL_H_
