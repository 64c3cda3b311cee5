// kernels/cuda/attention/sparse_decode_attention_sm90.h
//
// SparseDecodeAttention: the `fast` sparse MQA decode attention of V4.1 on
// Hopper (sm_90a). Same formula as SparseAttention (sparse_attention.h,
// kernels/cpu/sparse_attention.h; spec §4.3 step 6) over the KV rows as the
// model stores them, read once per CTA and dequantized on chip:
//   window pool:     FP8 e4m3 codes [rows, 512] + UE8M0 scales per 32 [rows, 16]
//   compressed pool: FP4 e2m1 packed [rows, 256] + E4M3 scales per 16 [rows, 32]
// (formats and packing of kernels/cpu/quant.h: QuantizeFp8 with block 32,
// QuantizeFp4 with block 16 and Fp4Scale::kE4m3). Each query lists window rows
// and compressed rows, -1 padded, as the model concatenates them (§4.3 step 5):
// the result equals the reference SparseAttention over
//   kv    = [DequantizeFp8(window pool); DequantizeFp4(compressed pool)]
//   index = [window_index row; compressed_index row + window_rows]
// up to the stated tolerance below.
//
// Numerics (not bit-identical to the reference; checked against it by bounds):
//   * q is rounded to bf16 (exact for the model's q, which is bf16-valued);
//     the dequantized KV is exact in bf16; QK^T runs on tensor cores
//     (mma.sync m16n8k16 bf16, fp32 accumulation), so the logits differ from
//     the reference only by fp32 summation order.
//   * Online softmax in the log2 domain (exp2 of scale*log2(e)*dot - running
//     max), the sink added to the denominator at the end; probabilities are
//     rounded to bf16 for P.V (also mma.sync bf16, fp32 accumulation) and the
//     denominator sums those rounded values, so each output is a convex
//     combination of V rows with weights within ~2^-8 of the reference's:
//     |out - ref| <= ~4e-3 * max_t |v_t[c]| per element, rel. L2 ~1e-3.
//   * Batch-invariant: one CTA per (query, group of 16 or 64 heads, by
//     SparseDecodeKernel); every reduction order is fixed, nothing depends
//     on other queries or on the batch size. Deterministic.
//
// Thread safety: stateless; safe from any thread.

#ifndef WEIR_KERNELS_CUDA_ATTENTION_SPARSE_DECODE_ATTENTION_SM90_H_
#define WEIR_KERNELS_CUDA_ATTENTION_SPARSE_DECODE_ATTENTION_SM90_H_

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/cuda/attention/attention_grouped_out.h"

typedef struct CUstream_st* cudaStream_t;

namespace weir::kernels::cuda {

// The only head_dim the kernel takes (V4.1: 448 no-RoPE + 64 RoPE dims, K = V).
inline constexpr int kSparseDecodeHeadDim = 512;
// Bytes per stored row: window FP8 codes + UE8M0 scales, compressed FP4
// codes + E4M3 scales (spec §4.9: 528 and 288).
inline constexpr int kSparseDecodeWindowCodeBytes = 512;
inline constexpr int kSparseDecodeWindowScaleBytes = 16;
inline constexpr int kSparseDecodeCompressedCodeBytes = 256;
inline constexpr int kSparseDecodeCompressedScaleBytes = 32;
// Longest index row per pool the launcher takes (no shared-memory limit;
// keeps query * width far from overflow).
inline constexpr int kSparseDecodeMaxWidth = 1 << 20;

// Which kernel runs the attention. Both hold the numerics above and each is
// batch-invariant on its own; they are not bit-identical to each other, so a
// decoder keeps one for all its steps.
enum class SparseDecodeKernel {
  kAuto,     // kMma16 (the faster at decode batches up to ~32; see README "Known limits")
  kMma16,    // one CTA per (query, 16 heads), mma.sync: every head group
             // gathers and dequantizes the query's rows itself
  kWgmma64,  // one CTA per (query, 64 heads), wgmma: each row gathered and
             // dequantized once per query, producer / consumer warpgroups
};

struct SparseDecodeAttentionParams {
  const float* q = nullptr;     // device [queries, heads, 512]; 8-byte aligned
  const float* sink = nullptr;  // device [heads] attention-sink logits
  // Window pool (sliding-window KV): FP8 e4m3 + UE8M0 per 32 elements.
  const uint8_t* window_codes = nullptr;   // device [window_rows, 512]; 16-byte aligned
  const uint8_t* window_scales = nullptr;  // device [window_rows, 16]; 4-byte aligned
  const int32_t* window_index = nullptr;   // device [queries, window_width]; rows or -1
  int64_t window_rows = 0;
  int window_width = 0;
  // Compressed pool: FP4 e2m1 (element 2k low nibble) + E4M3 per 16 elements.
  const uint8_t* compressed_codes = nullptr;   // device [compressed_rows, 256]; 16-byte aligned
  const uint8_t* compressed_scales = nullptr;  // device [compressed_rows, 32]; 8-byte aligned
  const int32_t* compressed_index = nullptr;   // device [queries, compressed_width]; rows or -1
  int64_t compressed_rows = 0;
  int compressed_width = 0;
  float* out = nullptr;  // device [queries, heads, 512]; 8-byte aligned; must not alias inputs
  int64_t queries = 0;
  int heads = 0;
  int head_dim = kSparseDecodeHeadDim;
  float scale = 0.0f;  // 0 means head_dim^-0.5
  bool round_bf16 = false;  // out through RoundToBf16 (the reference's bf16 boundary)
  SparseDecodeKernel kernel = SparseDecodeKernel::kAuto;
  // kWgmma64: the least number of 64-entry tiles a range (one CTA a range, a
  // query's ranges one thread-block cluster folding their states in rank
  // order); raised where the list would need more than 8 ranges. 0 means 2.
  // A value at least the list's tiles runs each query on one CTA (no
  // cluster): fewer CTAs, no fold, the better choice when the queries fill
  // the GPU (prefill). The ranges follow the list widths and this value
  // alone, so the bits never depend on the batch; a decoder keeps one value
  // for its life.
  int wgmma_range_tiles = 0;
  // Non-null: only the queries with query_role[query] == role are computed,
  // the others' outputs are left as they are. Two launches over one batch,
  // each with its own kernel or ranges, then compute every query: a decoder
  // gives its prompt positions and its generated ones each their own shape
  // (a query's arithmetic follows its role alone, never the batch).
  const int32_t* query_role = nullptr;  // device [queries]; 4-byte aligned
  int role = 0;
  // kWgmma64 (set explicitly) only: instead of `out` (then null), the output
  // written as V4.1's grouped output projection reads it: [queries, heads x
  // 512] cut into groups of group_width (a multiple of 512 dividing heads x
  // 512) and written [groups, queries, group_width], each head's last
  // rope_dim values rotated back (the inverse RoPE at the query's position,
  // then RoundToBf16 when round_bf16), the bits of decode's SwapAxes with
  // its RoPE after the plain output (kernels/cuda/decode/rows.h); with
  // out_bf16 instead of out (one of them) as ToBf16's bits, the bf16
  // grouped product's input. One launch a layer fewer in the decoder.
  // (attention_grouped_out.h; out 8-byte and out_bf16 4-byte aligned,
  // rope_dim even in (0, 512].)
  using GroupedOut = AttentionGroupedOut;
  GroupedOut grouped;
  // kWgmma64 (set explicitly) only: the pools' rows already dequantized, as
  // bf16 bits [rows, 512] (16-byte aligned) with the stored rows' exact
  // values (DequantizeKvMirror's bits: kv_mirror.h). With either set, the
  // kernel copies listed rows into its tiles instead of dequantizing them,
  // and a pool the launch reads needs its mirror (its codes and scales are
  // then not read and may be null). The bits of the stored path, fewer
  // instructions a row; a decoder may take it for some launches only.
  const uint16_t* window_bf16 = nullptr;
  const uint16_t* compressed_bf16 = nullptr;
  // kWgmma64: the consumers issue the next listed tile's Q K^T right behind
  // this tile's P V instead of after it has landed (the tensor cores run the
  // two back to back). The same instructions on every accumulator, so the
  // same bits; a choice of speed only.
  bool wgmma_overlap = false;
};

// Returns true if the launcher handles `params`: a SparseDecodeKernel value,
// wgmma_range_tiles >= 0, head_dim == 512,
// heads > 0, queries >= 0 with queries * ceil(heads / 16)
// < 2^31, 0 <= window_width,
// compressed_width <= kSparseDecodeMaxWidth, 0 <= window_rows,
// compressed_rows < 2^31, finite scale, and, where the sizes make them read
// or written, non-null and aligned pointers as listed in the struct (q, sink,
// out when queries > 0; a pool's index when queries * width > 0; its codes
// and scales when in addition rows > 0; query_role 4-byte aligned; with
// grouped.group_width > 0 the kWgmma64 kernel, out null and grouped's
// conditions instead of out's; with a bf16 mirror the kWgmma64 kernel and
// each read pool's mirror 16-byte aligned in place of its codes and scales).
bool SupportsSparseDecodeAttention(const SparseDecodeAttentionParams& params);

// Enqueues the attention on `stream`; writes every element of out (of the
// queries of `role`, with query_role). Nothing
// is allocated, nothing synchronizes: safe inside CUDA-graph capture.
// Index entries outside [0, rows) of their pool are treated as -1 (never
// read); a query without any valid entry gets out = 0 (as the reference).
// Duplicate entries count once per occurrence (as the reference).
// Returns INVALID_ARGUMENT when SupportsSparseDecodeAttention is false;
// INTERNAL with the CUDA error if the launch fails. queries == 0 enqueues
// nothing.
absl::Status SparseDecodeAttention(const SparseDecodeAttentionParams& params,
                                   cudaStream_t stream);

}  // namespace weir::kernels::cuda

#endif  // WEIR_KERNELS_CUDA_ATTENTION_SPARSE_DECODE_ATTENTION_SM90_H_
