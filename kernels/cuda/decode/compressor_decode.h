// kernels/cuda/decode/compressor_decode.h
//
// CompressorDecode: the KV compressor of kv-source layers (spec §4.3.1;
// kernels/cpu/compressor.h, kernels/cuda/attention/compressor_pool.h) for a
// batched DECODE step, where every row is one token of a different sequence
// at its own position, or (run_length) a few consecutive tokens of one. Each sequence keeps its
// partial group in a slot of a state pool; slot s's block [ratio, dim] has the layout of the
// `kv_state` / `score_state` of CompressorPool (entry p % ratio holds the latest token of that
// residue class), so a prefill by CompressorPool on the block and decode steps here continue each
// other.
//
// For each row t with slot s = state_slot[t] and position p = positions[t]:
//   1. kv_state[s, p % ratio, :] = kv[t, :]; score_state[s, p % ratio, :] = score[t, :]
//   2. if (p + 1) % ratio == 0 (the token completes group p / ratio):
//        out[t, c] = sum_i kv_i[c] * (exp(score_i[c] - max) / sum_j exp(score_j[c] - max))
//      over the group's entries i = 0 .. ratio-1 (position p + 1 - ratio + i), else
//      out[t, :] = +0.
// Step 2 uses exactly the arithmetic of the CPU kernel and of
// CompressorPoolKernel (max with std::max's comparison, then the exp sum,
// then the weighted sum, i ascending, fmath::ExpF, each step one fp32 IEEE
// operation, no FMA): latents and state are bit-identical to running
// cpu::CompressorPool (or cuda::CompressorPool) on the sequence token by token.
//
// Padding rows: a row with state_slot < 0, positions < 0, or (when slots > 0)
// state_slot >= slots touches no state and gets out[t, :] = +0, so a captured
// graph can run a fixed batch with unused rows.
//
// Thread safety: stateless; safe from any thread.

#ifndef WEIR_KERNELS_CUDA_DECODE_COMPRESSOR_DECODE_H_
#define WEIR_KERNELS_CUDA_DECODE_COMPRESSOR_DECODE_H_

#include <cstdint>

#include "absl/status/status.h"

typedef struct CUstream_st* cudaStream_t;

namespace weir::kernels::cuda::decode {

struct CompressorDecodeParams {
  const float* kv = nullptr;     // device [rows, dim] this token's compressor kv projection
  const float* score = nullptr;  // device [rows, dim] this token's gate projection
  // device pool [slots, ratio, dim]: slot s's partial group, entry s * ratio + (pos % ratio)
  float* kv_state = nullptr;
  float* score_state = nullptr;          // device pool [slots, ratio, dim]
  const int32_t* state_slot = nullptr;   // device [rows] the state block row t uses
  const int64_t* positions = nullptr;    // device [rows] the token's position
  // device [rows] or null (every row its own run): several consecutive
  // positions of one sequence in one step. run_length[t] = n > 0: rows
  // t .. t+n-1 are one sequence's positions p, p+1, ..., p+n-1 (same slot),
  // applied in that order; run_length[t] = 0: row t belongs to an earlier
  // row's run. The state and latents are those of n single-row steps.
  const int32_t* run_length = nullptr;
  float* out = nullptr;                  // device [rows, dim]: pooled latent or zeros
  int64_t rows = 0, dim = 0;
  int ratio = 2;           // >= 2 (ratio 1 needs no pooling)
  // Rows of a slot's state block: position q at row q % state_rows. 0 means
  // ratio (the CompressorPool layout above); more (ratio + k) is a ring that
  // keeps a partial group through k positions written past it and undone
  // (a decoder's rollback of rejected drafts).
  int64_t state_rows = 0;
  int64_t slots = 0;       // pool size, to bound state_slot; 0 = unchecked (trusted)
  bool round_bf16 = false;  // out through RoundBf16's rounding, in the same launch
  // The same latents and state from two kernels of a thread per (row,
  // channel) each (every row's latent, then the state rows), instead of one
  // where a run's first row walks the run on one thread per channel: a
  // prefill chunk's long run (V4.1's EP8 slice: 6 ms a launch for 4,096
  // rows). run_length is then not read (a run is found by its rows' slots
  // and consecutive positions). One launch more at decode.
  bool parallel_rows = false;
};

// Returns true if CompressorDecode handles `p`: rows >= 0 (at most 2^31 - 1),
// dim >= 0, ratio >= 2, state_rows 0 or >= ratio, slots >= 0 and, when
// rows * dim > 0, every pointer non-null.
bool SupportsCompressorDecode(const CompressorDecodeParams& p);

// Enqueues the store and pooling on `stream` (one kernel, one thread per
// (row, channel) doing both for its channel: race-free). Returns
// INVALID_ARGUMENT when SupportsCompressorDecode is false; INTERNAL with the
// CUDA error if the launch fails. rows * dim == 0 enqueues nothing.
// REQUIRES: no two non-padding rows use the same slot, except the rows of
// one run (run_length); runs cover every row; with slots == 0 every
// state_slot < the pool's slot count; out overlaps no other buffer.
absl::Status CompressorDecode(const CompressorDecodeParams& p, cudaStream_t stream);

}  // namespace weir::kernels::cuda::decode

#endif  // WEIR_KERNELS_CUDA_DECODE_COMPRESSOR_DECODE_H_
