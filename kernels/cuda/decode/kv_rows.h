// kernels/cuda/decode/kv_rows.h
//
// KvRowFinish: the end of a KV row's making in one launch. A decode step
// makes each KV-like row (the window KV, the compressed latent, the index
// key) with a linear and then four to six small passes: RmsNorm (bf16
// boundary), the forward RoPE of its last rope_dim elements (bf16
// boundary), its quantization (FakeQuant's values, or the stored codes and
// scales), and a scatter into the pool rows its block table names. This op
// does all of that for a row in one CTA, with the bits of those launches:
// it calls their device code (NormalizeRow, RopeCosSinAt / RopeRotatePair,
// FakeQuantValue, Fp4StoredCode, ActQuantEight), never a copy of it.
//
// The launcher validates its host-side parameters (INVALID_ARGUMENT),
// enqueues on `stream`, never synchronizes and never allocates (graph
// capture safe); INTERNAL carries the CUDA error of a failed launch. rows == 0
// enqueues nothing. Device data cannot be checked before launch: a position
// outside the RoPE table gives NaN rotated elements (ApplyRope's rule, then
// a NaN block: FakeQuant's NaN, the stored forms' NaN scale); a dst row < 0
// stores nothing for that row; dst rows past the pool are not checked
// (`pool_rows` bounds them when > 0: such a row stores nothing).
//
// Thread safety: stateless; safe from any thread.

#ifndef WEIR_KERNELS_CUDA_DECODE_KV_ROWS_H_
#define WEIR_KERNELS_CUDA_DECODE_KV_ROWS_H_

#include <cstdint>

#include "absl/status/status.h"

typedef struct CUstream_st* cudaStream_t;

namespace weir::kernels::cuda::decode {

// What KvRowFinish stores of a finished row at its pool row.
enum class KvRowStore {
  kNone,        // nothing (only `out`)
  kFloatFp8,    // FakeQuant kFp8 of the row, dim floats a pool row
  kFloatMxfp4,  // FakeQuant kMxfp4, dim floats a pool row
  kFloatNvfp4,  // FakeQuant kNvfp4Kv, dim floats a pool row
  kCodesFp8,    // ActQuantFp8: e4m3 codes [dim] + UE8M0 scales [dim / 32] a pool row
  kCodesMxfp4,  // QuantizeMxfp4: e2m1 codes [dim / 2] + E8M0 scales [dim / 32]
  kCodesNvfp4,  // QuantizeNvfp4Kv: e2m1 codes [dim / 2] + e4m3 scales [dim / 16]
};

struct KvRowFinishParams {
  const float* x = nullptr;  // device [rows, dim]: the linear's output
  // RmsNorm: weight [dim] (null: none, RmsNorm's null weight), eps.
  const float* norm_weight = nullptr;
  float eps = 1e-6f;
  // The bf16 boundary after the norm and after the RoPE (RmsNorm's and
  // ApplyRope's round_bf16).
  bool round_bf16 = false;
  // Forward RoPE of elements [dim - rope_dim, dim) at positions[row], the
  // by-position table [cos_sin_rows, rope_dim / 2, 2] (ApplyRope with one
  // head, cos_sin_by_position). positions null: no RoPE.
  const int64_t* positions = nullptr;
  const float* cos_sin = nullptr;
  int64_t cos_sin_rows = 0;
  int rope_dim = 0;
  // Optional device [rows, dim]: the row after the norm (rope_out false) or
  // after the RoPE (true), as floats. May be x itself.
  float* out = nullptr;
  bool rope_out = true;
  KvRowStore store = KvRowStore::kNone;
  // Pool row of each row, device [rows] (< 0: none); null = the row's own index.
  const int32_t* dst_rows = nullptr;
  int64_t pool_rows = 0;      // rows of the pool, to bound dst_rows; 0 = unchecked
  float* pool = nullptr;      // kFloat*: device [pool rows, dim]
  uint8_t* codes = nullptr;   // kCodes*: device [pool rows, code bytes a row]
  uint8_t* scales = nullptr;  // kCodes*: device [pool rows, scale bytes a row]
  int64_t rows = 0;
  int64_t dim = 0;  // a multiple of 32, at most kKvRowMaxDim
};

inline constexpr int64_t kKvRowMaxDim = 8192;

// True when KvRowFinish takes `p`: rows >= 0; for rows > 0: x, dim a positive
// multiple of 32 up to kKvRowMaxDim, with positions a cos_sin table of rows
// > 0 and an even rope_dim in (0, dim], the pointers the store needs, and
// codes 8-byte aligned for kCodesFp8.
bool SupportsKvRowFinish(const KvRowFinishParams& p);

absl::Status KvRowFinish(const KvRowFinishParams& p, cudaStream_t stream);

}  // namespace weir::kernels::cuda::decode

#endif  // WEIR_KERNELS_CUDA_DECODE_KV_ROWS_H_
