// kernels/cuda/attention/indexer_score.h
//
// IndexerScore on the GPU: the CUDA backend of kernels/cpu/indexer_score.h
// (lightning-indexer score of index-source layers, spec §4.3.3):
//   I[s, t] = sum_h relu(q[s, h] . k[t]) * w[s, h]      t < visible_len[s]
//   I[s, t] = -inf                                      t >= visible_len[s]
// with, when round_bf16 is set, the per-head dot, each weighted head term and
// the head sum rounded to bf16 (nearest even) at the CPU kernel's points.
//
// With key_offset, every query scores its own block of a shared key pool
// (query s: pool rows key_offset[s] + t), as a batched decode step does with
// one index-key pool for all sequences; row s then equals the CPU reference
// run on that query alone with its block of keys.
//
// Order of operations: the CPU's — each head's dot over the channels
// ascending, each product and sum rounded on its own (no fused
// multiply-add), relu as std::max(x, 0) (NaN and -0 kept), the weighted head
// terms added in head order — so the result is bit-identical to the CPU
// reference in both modes. The heads' dots of a key run on different threads
// (several a thread, side by side) and one thread a key adds the terms.
//
// Thread safety: stateless; safe from any thread.

#ifndef WEIR_KERNELS_CUDA_ATTENTION_INDEXER_SCORE_H_
#define WEIR_KERNELS_CUDA_ATTENTION_INDEXER_SCORE_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"

typedef struct CUstream_st* cudaStream_t;

namespace weir::kernels::cuda {

// Which kernel runs a launch; every form gives the same bits (the CPU's).
enum class IndexerScoreForm {
  kAuto,      // kPerQuery (kGrouped was no faster where it was meant to win)
  kPerQuery,  // a block a (query, tile of 32 keys): the query's heads staged each time
  // A block a group of queries (8 / ceil(heads / 16)) over a range of key
  // tiles: the heads staged once, each thread 4 heads x 4 keys of one query
  // (indexer_score_grouped.cuh). Needs dim % 4 == 0 and heads <= 128;
  // elsewhere kPerQuery runs. Measured on an H100 (2026-12-06,
  // indexer_score_bench, V4.1's 32 x 128 MXFP4 keys): a 4,096-row prefill
  // chunk 2.39 against 2.45 ms, decode batches 1 / 8 / 64 / 256 24.6 / 66 /
  // 245 / 956 against 18.4 / 21 / 83 / 296 us. So it is never chosen by kAuto.
  kGrouped,
  // A block 4 queries x tiles of 64 keys staged once for all four, each lane
  // 8 heads x 8 keys of its warp's query in registers and the head sum run
  // through the lane quad in head order (indexer_score_shared_keys.cuh);
  // ~100 KB a block at 32 x 128, two blocks an SM. Made for a prefill chunk
  // (every query of one sequence); queries of different key sources in one
  // block are right but restage the tile per source, so decode batches should
  // not take it. Needs dim % 4 == 0 and the block's shared memory within
  // 227 KiB (heads <= 64 at dim 128); elsewhere kPerQuery runs. Measured on
  // an H100 (2026-12-06, indexer_score_bench): the 4,096-row prefill chunk
  // 1.22 against 2.45 ms, decode batches 1 / 8 / 64 / 256 44 / 143 / 184 / 577
  // against 20 / 23 / 85 / 299 us. So kAuto does not choose it; the decoder
  // does for prefill-sized steps (DeviceDecoderOptions::indexer_shared_keys).
  kSharedKeys,
  // kSharedKeys with the heads' dots on the tensor cores (mma.sync over the
  // bf16 values of q's MXFP4 form and the MXFP4 keys; the terms and the head
  // sum as the CPU's). Where q_mxfp4 and MXFP4 keys (k_codes) are not both
  // given, kSharedKeys runs. The same bits wherever a dot's exact sum and
  // the CPU's partial sums fit fp32 (indexer_score_shared_keys.cuh says why
  // that is nearly always), the tensor core's rounding elsewhere. Built in
  // the thirty-eighth session, not yet run on a GPU.
  kSharedKeysMma,
  // kSharedKeysMma with the head sum through each warp's shared scratch, 16
  // keys at a time, instead of the lanes' shuffle chain (about 1,000
  // shuffles and predicated adds a pass and lane against its 128 mma): the
  // same additions in the same order, so kSharedKeysMma's bits; 9 KB more
  // shared memory a block. Where kSharedKeysMma does not apply, as it.
  // Built in the forty-second session: not yet run on a GPU.
  kSharedKeysMmaSum,
  // kSharedKeysMmaSum with q's MXFP4 form and the keys staged once as bf16
  // (the mma fragments by ldmatrix instead of two floats packed at every
  // use) and a term's bf16 roundings two values a conversion
  // (indexer_score_shared_keys_bf16.cuh): the same bits; 61 KB a block at
  // 32 x 128 (three an SM). Where it does not apply, as kSharedKeysMmaSum.
  // Built in the forty-third session: not yet run on a GPU.
  kSharedKeysMmaBf16,
  // kSharedKeysMmaBf16's arithmetic laid out for decode steps, whose rows
  // each read their own sequence's keys (indexer_score_decode_bf16.cuh): a
  // block one query and a range of 64-key tiles, its heads staged once as
  // bf16, each tile's keys once, the four warps 16 keys each over every
  // head; ~35 KB a block at 32 x 128. The same bits as the mma forms. Needs
  // q_mxfp4, MXFP4 keys and dim % 32 == 0; elsewhere kPerQuery runs. Built
  // in the forty-sixth session: not yet run on a GPU.
  kDecodeMmaBf16,
};

struct IndexerScoreParams {
  const float* q = nullptr;              // device [queries, heads, dim]
  // device [keys, dim]; with key_offset, a key pool [pool_rows, dim] holding
  // rows key_offset[s] .. key_offset[s] + visible_len[s] - 1 for every s.
  // Null when the keys come as MXFP4 (k_codes, k_scales).
  const float* k = nullptr;
  const float* weights = nullptr;        // device [queries, heads]
  const int64_t* visible_len = nullptr;  // device [queries], each in [0, keys]
  float* out = nullptr;                  // device [queries, keys]; must not alias the inputs
  int64_t queries = 0;
  int heads = 0;
  int dim = 0;
  int64_t keys = 0;
  bool round_bf16 = false;  // the reference's bf16 mode (IndexerScoreArgs::round_bf16)
  // device [queries]: query s scores keys k[(key_offset[s] + t) * dim ...]
  // for t < keys; null = 0 (every query scores the same keys). Only the rows
  // below visible_len[s] are read. Cannot be checked on the host: a negative
  // key_offset[s] reads nothing and makes that query's visible scores NaN.
  const int64_t* key_offset = nullptr;
  // Paged key pools (instead of key_offset): query s reads its keys through
  // the table row of its slot, key t at pool row
  //   block_table[table_slot[s] * table_width + t / entries_per_block]
  //       * entries_per_block + t % entries_per_block,
  // as a decoder whose index keys live in blocks of entries_per_block
  // entries does. Device values are not checked on the host: a negative
  // table_slot[s] makes that query's visible scores NaN, a negative block
  // (or t / entries_per_block >= table_width) makes the scores of its keys
  // NaN. Only the keys below visible_len[s] are read.
  const int32_t* block_table = nullptr;  // device [slots, table_width]
  const int32_t* table_slot = nullptr;   // device [queries]
  int table_width = 0;
  int entries_per_block = 0;
  // The keys in stored form instead of k (the decoder's MXFP4 index-key
  // pool): device e2m1 codes [rows, dim / 2] (element 2j in the low nibble;
  // 4-byte aligned) and E8M0 scales [rows, dim / 32], rows as k's; dim % 32
  // == 0. Each key is scored as its exact fp32 value (the
  // DequantizeFp4(kE8m0) of the codes), so the scores are bit-identical to
  // those of k = that dequantized copy.
  const uint8_t* k_codes = nullptr;
  const uint8_t* k_scales = nullptr;
  // Inputs made in this launch instead of a launch before it (the fast
  // decoder's indexer; the same bits): with q_mxfp4 each query is used as
  // FakeQuant kMxfp4 of q (dim % 32 == 0) makes it, as it is staged; with
  // weights_factor != 0 each weight w is used as decode's Scale makes it,
  // fl(w * weights_factor), then rounded to bf16 when round_bf16.
  bool q_mxfp4 = false;
  float weights_factor = 0.0f;
  IndexerScoreForm form = IndexerScoreForm::kAuto;
};

// The form a launch of `params` runs (kAuto resolved; kGrouped or
// kSharedKeys where it does not apply falls back to kPerQuery).
IndexerScoreForm ResolveIndexerScoreForm(const IndexerScoreParams& params);

// Shared memory one block of the launcher needs: a tile of 32 keys, the
// query's heads and the heads' terms of the tile's keys,
// (32 * (dim + 1) + heads * dim + heads * 32) * 4 bytes (with or without
// key_offset: the tile is then restaged per query), rounded up to 8 bytes,
// plus the 32 keys' pool rows (8 bytes each; used with a block table).
size_t IndexerScoreSharedBytes(int heads, int dim);

// Returns true if the launcher handles `params`: queries >= 0, heads > 0,
// dim > 0, keys >= 0, IndexerScoreSharedBytes(heads, dim) within the 227 KiB
// a Hopper block may use (heads * dim <= 41344 at dim 128), and non-null
// q, weights, visible_len, out and the keys (k alone, or k_codes and k_scales
// with dim % 32 == 0 and k null) wherever queries * keys > 0. key_offset
// is optional (null = 0); its values live on the device and are not checked.
// block_table excludes key_offset and needs table_slot, table_width > 0 and
// entries_per_block > 0.
bool SupportsIndexerScore(const IndexerScoreParams& params);

// Enqueues the scoring on `stream`; writes every element of out. A
// visible_len outside [0, keys] is clamped into it (the device cannot report
// it, unlike the CPU reference, which returns INVALID_ARGUMENT). Returns
// INVALID_ARGUMENT when SupportsIndexerScore is false; INTERNAL with the CUDA
// error if the launch fails. queries * keys == 0 enqueues nothing.
absl::Status IndexerScore(const IndexerScoreParams& params, cudaStream_t stream);

}  // namespace weir::kernels::cuda

#endif  // WEIR_KERNELS_CUDA_ATTENTION_INDEXER_SCORE_H_
