// kernels/cpu/compressor.h
//
// KV compressor of DeepSeek-V4.1 kv-source layers (spec §4.3.1): every group
// of `ratio` consecutive tokens [j*r, (j+1)*r) becomes one latent
//   latent_j[c] = sum_i softmax_i(score_i[c]) * kv_i[c]     (per channel, i in order)
// with kv = wkv_c x and score = wgate x (both fp32 [tokens, dim], computed by
// the caller with cpu::Linear). softmax_i(s)[i] = exp(s_i - max) / sum exp(...)
// in fp32 (exp = kernels/common/fmath.h ExpF), then multiplied with kv_i and
// summed over i ascending.
// Tokens are consumed one at a time at absolute positions p: slot p % r of
// the partial-group state takes (kv, score), and when (p+1) % r == 0 group
// p / r is emitted. A chunk at any start_pos therefore equals running its
// tokens one by one, and the state carries an incomplete group across calls.
// Ratio 1 emits kv unchanged (the reference's ratio-1 path is norm(wkv x)).
// What follows pooling is the caller's, in the reference's order: bf16
// rounding of the latent, RMSNorm, index keys from the pre-RoPE latent, RoPE
// at position j*r, FP4 (16-block, E4M3 scale) quantization.
//
// State contract: slots hold the latest token of each residue class mod r.
// Rolling back below the start of the current group needs the overwritten
// slots back: keep them, or replay from the group start.
//
// Thread safety: pure function over caller-owned memory.

#ifndef WEIR_KERNELS_CPU_COMPRESSOR_H_
#define WEIR_KERNELS_CPU_COMPRESSOR_H_

#include <cstdint>
#include <span>

#include "absl/status/status.h"

namespace weir::kernels::cpu {

// Returns the number of groups completed by tokens [start_pos, start_pos +
// tokens): (start_pos + tokens) / ratio - start_pos / ratio.
int64_t CompressedCount(int64_t start_pos, int64_t tokens, int ratio);

struct CompressorPoolArgs {
  std::span<const float> kv;     // [tokens, dim]
  std::span<const float> score;  // [tokens, dim]
  std::span<float> kv_state;     // [ratio, dim], in/out partial group
  std::span<float> score_state;  // [ratio, dim], in/out partial group
  std::span<float> out;          // [CompressedCount(...), dim]: groups start_pos/ratio, ...
  int64_t start_pos = 0;
  int64_t tokens = 0;
  int64_t dim = 0;
  int ratio = 0;
};

// Pools the completed groups into args.out and updates the state. Returns
// INVALID_ARGUMENT on ratio < 1, negative start_pos or mis-sized spans.
absl::Status CompressorPool(const CompressorPoolArgs& args);

}  // namespace weir::kernels::cpu

#endif  // WEIR_KERNELS_CPU_COMPRESSOR_H_
