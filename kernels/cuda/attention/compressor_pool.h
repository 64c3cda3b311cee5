// kernels/cuda/attention/compressor_pool.h
//
// CompressorPool on the GPU: the CUDA backend of kernels/cpu/compressor.h
// (KV compressor pooling of kv-source layers, spec §4.3.1). Every group of
// `ratio` consecutive positions [j*r, (j+1)*r) completed by the chunk becomes
//   latent_j[c] = sum_i kv_i[c] * (exp(score_i[c] - max) / sum_i exp(...)),
// and the partial-group state is updated as if the tokens were consumed one
// at a time: slot p % r holds the latest token of each residue class.
//
// Order of operations: one thread per (group, channel) runs the CPU's loops
// (max, then the exp sum, then the weighted sum, i ascending) with the same
// roundings, the same exp (kernels/common/fmath.h ExpF) and no fused
// multiply-add: latents and state are bit-identical to the CPU reference.
//
// Thread safety: stateless; safe from any thread.

#ifndef WEIR_KERNELS_CUDA_ATTENTION_COMPRESSOR_POOL_H_
#define WEIR_KERNELS_CUDA_ATTENTION_COMPRESSOR_POOL_H_

#include <cstdint>

#include "absl/status/status.h"

typedef struct CUstream_st* cudaStream_t;

namespace weir::kernels::cuda {

struct CompressorPoolParams {
  const float* kv = nullptr;     // device [tokens, dim]
  const float* score = nullptr;  // device [tokens, dim]
  float* kv_state = nullptr;     // device [ratio, dim], in/out partial group
  float* score_state = nullptr;  // device [ratio, dim], in/out partial group
  // device [CompressedPoolCount(start_pos, tokens, ratio), dim]: groups
  // start_pos / ratio, ... in order. Must not alias any other buffer.
  float* out = nullptr;
  int64_t start_pos = 0;
  int64_t tokens = 0;
  int64_t dim = 0;
  int ratio = 0;
};

// Returns the number of groups completed by tokens [start_pos, start_pos +
// tokens): (start_pos + tokens) / ratio - start_pos / ratio (as
// cpu::CompressedCount). REQUIRES: ratio >= 1.
int64_t CompressedPoolCount(int64_t start_pos, int64_t tokens, int ratio);

// Returns true if the launcher handles `params`: ratio >= 1, dim > 0,
// start_pos >= 0, tokens >= 0, non-null kv_state / score_state, kv / score
// when tokens > 0 and out when a group completes.
bool SupportsCompressorPool(const CompressorPoolParams& params);

// Enqueues the pooling and then the state update on `stream` (two kernels).
// Returns INVALID_ARGUMENT when SupportsCompressorPool is false; INTERNAL
// with the CUDA error if a launch fails. tokens == 0 enqueues nothing.
absl::Status CompressorPool(const CompressorPoolParams& params, cudaStream_t stream);

}  // namespace weir::kernels::cuda

#endif  // WEIR_KERNELS_CUDA_ATTENTION_COMPRESSOR_POOL_H_
