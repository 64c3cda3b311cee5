// kernels/cuda/attention/kv_mirror.h
//
// DequantizeKvMirror: the rows some sequences' attention will read, from the
// stored pools (SparseDecodeAttention's formats: the window pool FP8 e4m3 +
// UE8M0 per 32, the compressed pool FP4 e2m1 + E4M3 per 16) into bf16
// mirrors of the same row numbering, so that SparseDecodeAttention's kWgmma64
// copies them (SparseDecodeAttentionParams::window_bf16 / compressed_bf16)
// instead of dequantizing every listed row once per query. A prefill chunk's
// queries list the same rows again and again; the mirror dequantizes each row
// once.
//
// Arithmetic: the kernel's own dequantization helpers (the stored form's
// producer), so a mirror row holds the bits the attention's tile would hold;
// the values are exact (e4m3 x 2^k and e2m1 x e4m3 fit bf16).
//
// Rows, per sequence i (a warp a row):
//   * its window ring: window rows [slot * ring_rows, (slot + 1) * ring_rows);
//   * its staging rows: window rows [stage_first, stage_first + stage_rows)
//     (stage_rows 0: none);
//   * its compressed entries j < (last_position + 1) / ratio (ratio 0: none),
//     through its block table: row table[slot][j / e] * e + j % e for e
//     entries a block (a table entry < 0 is skipped).
// Rows outside a pool's [0, rows) are skipped; other mirror rows are left as
// they are.
//
// Thread safety: stateless; safe from any thread.

#ifndef WEIR_KERNELS_CUDA_ATTENTION_KV_MIRROR_H_
#define WEIR_KERNELS_CUDA_ATTENTION_KV_MIRROR_H_

#include <cstdint>

#include "absl/status/status.h"

typedef struct CUstream_st* cudaStream_t;

namespace weir::kernels::cuda {

struct KvMirrorParams {
  // Window pool and its mirror ([window_rows, 512] bf16 bits, 16-byte aligned).
  const uint8_t* window_codes = nullptr;   // [window_rows, 512]; 16-byte aligned
  const uint8_t* window_scales = nullptr;  // [window_rows, 16]
  uint16_t* window_bf16 = nullptr;
  int64_t window_rows = 0;
  int64_t ring_rows = 0;  // rows of a slot's ring
  // Compressed pool and its mirror ([compressed_rows, 512] bf16 bits).
  const uint8_t* compressed_codes = nullptr;   // [compressed_rows, 256]; 8-byte aligned
  const uint8_t* compressed_scales = nullptr;  // [compressed_rows, 32]
  uint16_t* compressed_bf16 = nullptr;
  int64_t compressed_rows = 0;
  const int32_t* block_table = nullptr;  // [slots, table_width]
  int table_width = 0;
  int entries_per_block = 0;
  int ratio = 0;  // 0: no compressed rows
  // The sequences, [sequences] each.
  const int32_t* slot = nullptr;
  const int64_t* last_position = nullptr;
  const int32_t* stage_first = nullptr;
  const int32_t* stage_rows = nullptr;
  int sequences = 0;
  // At least every sequence's rows (ring + staging + entries): the grid.
  int64_t max_rows = 0;
};

// True when DequantizeKvMirror takes `p`: sequences >= 0, max_rows >= 0,
// ring_rows >= 0, pool rows in [0, 2^31), and where sequences * max_rows > 0
// the sequence arrays; with window rows the window pointers (codes and mirror
// 16-byte aligned); with ratio > 0 (and compressed rows) the compressed
// pointers (codes 8-byte, mirror 16-byte aligned), the table, table_width > 0
// and entries_per_block > 0.
bool SupportsKvMirror(const KvMirrorParams& p);

// Enqueues the dequantization on `stream` (no allocation, no host sync:
// graph-capturable). INVALID_ARGUMENT when SupportsKvMirror is false;
// INTERNAL with the CUDA error if the launch fails.
absl::Status DequantizeKvMirror(const KvMirrorParams& p, cudaStream_t stream);

}  // namespace weir::kernels::cuda

#endif  // WEIR_KERNELS_CUDA_ATTENTION_KV_MIRROR_H_
